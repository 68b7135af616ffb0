// The config's aio section mapped onto the aio engine (see zinf_config.h).
#include "zinf_config.h"

zinf_aio_params zinf_config_aio_params(const zinf_config *cfg) {
    // The schema bounds each value to what the engine takes.
    return (zinf_aio_params){.block_size = (uint32_t)cfg->aio.block_size,
                             .queue_depth = (uint32_t)cfg->aio.queue_depth,
                             .threads = (uint32_t)cfg->aio.intra_op_parallelism};
}
