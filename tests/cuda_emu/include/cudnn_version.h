// CUDA emulation (tests only): the version of cuDNN whose backend API the emulation
// follows (tests/cuda_emu/cudnn.cpp), with the macros of NVIDIA's cudnn_version.h.
#ifndef CUDA_EMU_CUDNN_VERSION_H
#define CUDA_EMU_CUDNN_VERSION_H

#define CUDNN_MAJOR      9
#define CUDNN_MINOR      19
#define CUDNN_PATCHLEVEL 0

#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)

#endif
