// Python's str whitespace rules, which Megatron's task code relies on (str.strip(), str.split(),
// re's \s), for UTF-8 text: the same characters count as whitespace, so counts and cuts agree.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace megatron::tasks {

// The byte length of the whitespace character (str.isspace()) starting at `pos`, or 0.
std::size_t python_space_at(std::string_view text, std::size_t pos);
// str.strip()
std::string_view python_strip(std::string_view text);
// str.split() without arguments: runs of whitespace separate, no empty pieces.
std::vector<std::string_view> python_split(std::string_view text);

}  // namespace megatron::tasks
