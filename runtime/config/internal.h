// Config internals: the schema table that drives parsing, defaults and printing.
#ifndef ZINF_CONFIG_INTERNAL_H
#define ZINF_CONFIG_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "zinf_internal.h"
#include "zinf_config.h"

// The largest integer a config holds: 2^53, below which every integer is exact in a
// double (JSON numbers are read as doubles). A value zinf derives (train_batch_size)
// stays within it too, so that the normalized config reads back.
#define CONFIG_INT_MAX ((int64_t)1 << 53)

typedef enum key_kind {
    K_SECTION, // a JSON object holding more keys
    K_BOOL,    // bool
    K_INT,     // int64_t; JSON integers and integral reals (DeepSpeed's 5e8)
    K_BYTES,   // int64_t; as K_INT, or a string with a binary suffix ("2G")
    K_REAL,    // double
    K_REAL2,   // double[2] (betas)
    K_STRING,  // char * (owned)
    K_ENUM,    // int, index into names; matched case-insensitively
    K_PATHS,   // zinf_path_list: a string or an array of strings
    K_NAMES,   // unsigned, a bit per name: an array of names from names
    K_OFF,     // a DeepSpeed key zinf does not implement yet: only its "off" value passes
    K_INERT,   // a DeepSpeed key with no meaning in zinf: accepted, noted in the log
} key_kind;

enum {
    F_NULL = 1u << 0,     // null is allowed: -1 for numbers, NULL for strings, off for sections
    F_OPTIONAL = 1u << 1, // a section whose presence means something (off: its bool)
    F_GT_MIN = 1u << 2,   // the minimum itself is excluded
    F_LT_MAX = 1u << 3,   // the maximum itself is excluded
    F_REQUIRED = 1u << 4, // must be given when its section is present
    F_LLAMA = 1u << 5,    // a model key of the Llama family: printed only for its archs
    F_SIM = 1u << 6,      // a key of the simulated device: printed only with device.backend "sim"
    F_EMPTY = 1u << 7,    // a string that may be "" (DeepSpeed's own default for it)
    // scheduler.params keys: which schedules take them
    F_WLR = 1u << 8,
    F_WDLR = 1u << 9,
    F_WCLR = 1u << 10,
};

typedef struct key {
    const char *path; // canonical key path, "zero_optimization.stage"
    key_kind kind;
    ptrdiff_t off;            // offset of the field in zinf_config; -1: none
    double def, def2;         // defaults of numbers, bools (0/1), enums (index), betas
    double min, max;          // valid range of numbers
    const char *const *names; // K_ENUM spellings, canonical first per value
    const char *alias;        // another name for this key in the same section
    const char *off_json;     // K_OFF: the only accepted value (DeepSpeed's default)
    const char *hint;         // K_OFF / K_INERT: what to do instead, or why
    unsigned flags;
} key;

extern const key zinf_config_keys[];
extern const size_t zinf_config_nkeys;

const key *config_key_find(const char *path);
// The last component of a path ("stage" for "zero_optimization.stage").
const char *config_key_name(const char *path);
// Length of the parent part of path ("zero_optimization" for ...stage; 0 at top).
size_t config_key_parent_len(const char *path);

// State of one parse: which keys the input gave (defaults fill the rest), and the
// name errors are reported under.
typedef struct parse_ctx {
    const char *name;
    bool *given;      // per zinf_config_keys entry
    const char **via; // the spelling used (canonical or alias), for conflict messages
} parse_ctx;

// Cross-key rules and derived defaults, after every key has a value.
zinf_status config_apply_rules(zinf_config *cfg, const parse_ctx *ctx, int world_size);

// The model section's rules (model.c).
zinf_status config_model_rules(zinf_config *cfg, const parse_ctx *ctx);
// Whether the input gave the key at path.
bool given(const parse_ctx *ctx, const char *path);
// keypath's file must exist and be readable: an error naming the key otherwise.
zinf_status config_check_file(const parse_ctx *ctx, const char *keypath, const char *file);

static inline void *config_field(zinf_config *cfg, const key *k) { return (char *)cfg + k->off; }

#endif
