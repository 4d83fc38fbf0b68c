// Checks raw TOML tables against schemas: kinds, ranges, choices, unknown keys, table rules.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "megatron/config/raw_config.h"
#include "megatron/config/schema.h"
#include "megatron/config/table.h"

namespace megatron::config {

// The closest candidate by edit distance if it is close enough to be a plausible typo, else "".
std::string suggest(std::string_view word, const std::vector<std::string>& candidates);

// Validates `raw` (nullptr: the table is absent and every key takes its default) against `schema`.
// `others` are the schemas of the other tables, so a key written in the wrong table is pointed to
// the right one. Throws ConfigError naming file, line, column and key path.
ConfigTable validate_table(const RawTable* raw, const TableSchema& schema,
                           const std::vector<const TableSchema*>& others = {});

}  // namespace megatron::config
