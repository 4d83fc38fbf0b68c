// Out-of-line destructors anchor the Error vtables and type_info in libmegatron_core.so.
#include "megatron/error.h"

namespace megatron {

Error::~Error() = default;
ConfigError::~ConfigError() = default;
PluginError::~PluginError() = default;
UsageError::~UsageError() = default;
NumericalError::~NumericalError() = default;
CheckpointSaveError::~CheckpointSaveError() = default;
CheckpointDamagedError::~CheckpointDamagedError() = default;

}  // namespace megatron
