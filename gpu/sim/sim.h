// The sim backend's internals: an op record's modeled seconds.
#ifndef ZINF_GPU_SIM_H
#define ZINF_GPU_SIM_H

#include "../internal.h"

// The modeled seconds of one op on the device (launch cost included).
double sim_op_seconds(const zinf_sim_rates *r, const op_record *op);

#endif
