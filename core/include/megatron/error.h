// The one exception family the core and plugins throw; the host maps each kind to an exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace megatron {

// Anything the user can fix (bad config, bad plugin, bad data file, bad CLI) is an Error whose
// message names what is wrong and where. Plugins throw only these, so the type_info lives in core.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  ~Error() override;
};

// Invalid configuration: file, line, column and key path are in the message.
class ConfigError : public Error {
 public:
  using Error::Error;
  ~ConfigError() override;
};

// A plugin file that cannot be used: the file and the reason are in the message.
class PluginError : public Error {
 public:
  using Error::Error;
  ~PluginError() override;
};

// Training stopped because the loss or the gradient norm stayed NaN/Inf
// ([training] max_skipped_nan_steps); the message names the iteration and what was saved.
class NumericalError : public Error {
 public:
  using Error::Error;
  ~NumericalError() override;
};

// A checkpoint could not be saved (disk full, I/O error) and the run stops because of it; the
// previous checkpoint is untouched.
class CheckpointSaveError : public Error {
 public:
  using Error::Error;
  ~CheckpointSaveError() override;
};

// A checkpoint whose stored data fails its checksums (or cannot be read back): the message names
// the file and the tensor. Nothing is repaired or removed.
class CheckpointDamagedError : public Error {
 public:
  using Error::Error;
  ~CheckpointDamagedError() override;
};
// Bad command-line usage.
class UsageError : public Error {
 public:
  using Error::Error;
  ~UsageError() override;
};

}  // namespace megatron
