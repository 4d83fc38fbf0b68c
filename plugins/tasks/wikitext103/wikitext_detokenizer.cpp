// Megatron's wikitext_detokenizer, rule for rule. Its regular expressions are written out by hand:
// each is either a literal (re.sub of a pattern without metacharacters that matter) or "an
// opening bracket, whitespace, the shortest run without the closing bracket, whitespace, the
// closing bracket", and libstdc++'s std::regex recurses once per matched character, which a long
// unmatched quote in a 1.3 MB test file would turn into a stack overflow.
#include "wikitext_detokenizer.h"

#include "megatron/tasks/python_text.h"

namespace megatron::wikitext {

namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  std::size_t pos = 0;
  while (true) {
    const std::size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// re.sub(r"<open>\s*([^<close>]*?)\s*<close>", r"<open>\1<close>", s): from each opening
// character to the first closing one after it, the enclosed text loses its leading and trailing
// whitespace (Python's \s); scanning resumes after the closing character. An opening character
// without a closing one after it is left as it is.
void tighten_brackets(std::string& s, char open, char close) {
  std::string out;
  out.reserve(s.size());
  std::size_t pos = 0;
  while (pos < s.size()) {
    if (s[pos] != open) {
      out.push_back(s[pos++]);
      continue;
    }
    const std::size_t end = s.find(close, pos + 1);
    if (end == std::string::npos) {
      out.push_back(s[pos++]);
      continue;
    }
    const std::string_view inner =
        tasks::python_strip(std::string_view(s).substr(pos + 1, end - pos - 1));
    out.push_back(open);
    out.append(inner);
    out.push_back(close);
    pos = end + 1;
  }
  s = std::move(out);
}

}  // namespace

std::string wikitext_detokenize(std::string_view text) {
  std::string s(text);
  // contractions
  replace_all(s, "s '", "s'");
  // Megatron's re.sub(r"/' [0-9]/", r"/'[0-9]/", ...) has no special characters but the class,
  // which matches one digit; the replacement is the literal text "/'[0-9]/".
  {
    std::string out;
    std::size_t pos = 0;
    while (true) {
      const std::size_t hit = s.find("/' ", pos);
      if (hit == std::string::npos) break;
      const bool digit_then_slash =
          hit + 4 < s.size() && s[hit + 3] >= '0' && s[hit + 3] <= '9' && s[hit + 4] == '/';
      if (!digit_then_slash) {
        out.append(s, pos, hit + 1 - pos);
        pos = hit + 1;
        continue;
      }
      out.append(s, pos, hit - pos);
      out.append("/'[0-9]/");
      pos = hit + 5;
    }
    out.append(s, pos, std::string::npos);
    s = std::move(out);
  }
  // number separators
  replace_all(s, " @-@ ", "-");
  replace_all(s, " @,@ ", ",");
  replace_all(s, " @.@ ", ".");
  // punctuation
  replace_all(s, " : ", ": ");
  replace_all(s, " ; ", "; ");
  replace_all(s, " . ", ". ");
  replace_all(s, " ! ", "! ");
  replace_all(s, " ? ", "? ");
  replace_all(s, " , ", ", ");
  // double brackets
  tighten_brackets(s, '(', ')');
  tighten_brackets(s, '[', ']');
  tighten_brackets(s, '{', '}');
  tighten_brackets(s, '"', '"');
  tighten_brackets(s, '\'', '\'');
  // miscellaneous
  replace_all(s, "= = = =", "====");
  replace_all(s, "= = =", "===");
  replace_all(s, "= =", "==");
  replace_all(s, " \xc2\xb0 ", "\xc2\xb0");  // chr(176), the degree sign, in UTF-8
  replace_all(s, " \n", "\n");
  replace_all(s, "\n ", "\n");
  replace_all(s, " N ", " 1 ");
  replace_all(s, " 's", "'s");
  return s;
}

}  // namespace megatron::wikitext
