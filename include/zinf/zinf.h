// zinf: train models far larger than the GPU holds (ZeRO 1-3, CPU and NVMe offload).
// The umbrella header: everything a program embedding the engine needs.
#ifndef ZINF_H
#define ZINF_H

#include "zinf_base.h"
#include "zinf_aio.h"
#include "zinf_adam.h"
#include "zinf_gpu.h"
#include "zinf_offload.h"
#include "zinf_comm.h"
#include "zinf_config.h"
#include "zinf_model.h"
#include "zinf_schedule.h"
#include "zinf_engine.h"
#include "zinf_checkpoint.h"

// The size of a public struct ("zinf_optim_tile"), the offset of one of its fields
// ("zinf_optim_tile.grad_dtype") or the value of a public enum constant ("ZINF_DTYPE_BF16")
// as this library was compiled; -1 for a name it does not list. For bindings that
// mirror the structs (the Python package checks its ctypes copies at import).
int64_t zinf_abi(const char *name);

#endif
