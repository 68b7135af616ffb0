// Monitors: DeepSpeed's tensorboard and csv_monitor. The engine's rank 0 hands them each
// step's figures, named as DeepSpeed names its own ("Train/Samples/train_loss") and
// stepped by the samples trained so far, as DeepSpeed steps them.
#ifndef ZINF_MONITOR_H
#define ZINF_MONITOR_H

#include <stdint.h>

#include "zinf_config.h"

typedef struct zinf_monitor zinf_monitor;

typedef struct zinf_monitor_event {
    const char *name;
    double value;
} zinf_monitor_event;

// The monitors cfg enables, their directories made; *out is NULL when it enables none.
zinf_status zinf_monitor_open(zinf_monitor **out, const zinf_config *cfg);
// Append n figures at step `samples` to every monitor, flushed so that a reader sees
// them while the run goes on. A failed write names the file.
zinf_status zinf_monitor_write(zinf_monitor *m, int64_t samples, const zinf_monitor_event *events, int n);
void zinf_monitor_close(zinf_monitor *m); // NULL is a no-op

// ---- TensorBoard's event file (tfevents.c) ----
// A file of TFRecords, each an Event protobuf: the first holds the file version, each
// later one a step's scalars (Summary values with a tag and a float simple_value).
typedef struct zinf_tfevents zinf_tfevents;
zinf_status zinf_tfevents_open(zinf_tfevents **out, const char *dir);
zinf_status zinf_tfevents_write(zinf_tfevents *t, int64_t step, const zinf_monitor_event *events, int n);
void zinf_tfevents_close(zinf_tfevents *t);

#endif
