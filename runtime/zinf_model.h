// zinf models: the GPT-2 model and its weights files. This header starts with the
// file format weights travel in: safetensors (an 8-byte little-endian header length,
// a JSON header naming each tensor's dtype, shape and byte range, then the bytes).
#ifndef ZINF_MODEL_H
#define ZINF_MODEL_H

#include <stdint.h>

#include "zinf_base.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { ZINF_ST_MAX_DIMS = 8 };

typedef struct zinf_st_tensor {
    const char *name;
    zinf_dtype dtype; // F32, BF16 or F16 (the dtypes weights come in)
    int ndim;
    int64_t shape[ZINF_ST_MAX_DIMS];
    uint64_t nbytes;
    const void *data; // reading: inside the mapped file; writing: the caller's bytes
} zinf_st_tensor;

typedef struct zinf_safetensors zinf_safetensors;

// Map path and check it whole: header length within the file, a JSON object without
// duplicate names, known dtypes, shapes whose size matches the byte range, ranges
// inside the data that cover it without gaps or overlaps. Errors name the file and the
// tensor. "__metadata__" is allowed and ignored.
zinf_status zinf_safetensors_open(zinf_safetensors **out, const char *path);
void zinf_safetensors_close(zinf_safetensors *st); // NULL is a no-op
int zinf_safetensors_count(const zinf_safetensors *st);
// Tensors in file order (by offset); NULL past the end.
const zinf_st_tensor *zinf_safetensors_at(const zinf_safetensors *st, int i);
// NULL when there is no tensor of that name.
const zinf_st_tensor *zinf_safetensors_find(const zinf_safetensors *st, const char *name);

// Write n tensors to path (through a temporary file renamed into place, so a failed
// or interrupted write leaves no partial file), in the order given.
zinf_status zinf_safetensors_write(const char *path, const zinf_st_tensor *tensors, int n);

#ifdef __cplusplus
}
#endif
#endif
