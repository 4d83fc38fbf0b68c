// Text handling for the server's answers: whole UTF-8 characters only in a stream, and stop
// strings cut from the generated text (and held back while they may still be forming).
#pragma once

#include <string>
#include <vector>

namespace megatron::app::serve {

// The length of `text` without a trailing incomplete UTF-8 character (a byte-level BPE token may
// end inside one; the next token completes it).
std::size_t complete_utf8_length(const std::string& text);

// The length of `text` a stream may send now: not a trailing piece that could begin one of
// `stops` (it might become the stop string, which is not sent).
std::size_t stop_safe_length(const std::string& text, const std::vector<std::string>& stops);

// `text` up to the first of `stops` it holds (all of it when it holds none).
std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stops);

}  // namespace megatron::app::serve
