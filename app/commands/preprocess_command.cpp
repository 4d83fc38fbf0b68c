// `megatron-app preprocess`: loose JSON lines -> Megatron indexed dataset(s), as Megatron-LM's
// tools/preprocess_data.py does (same file names, same sequences and documents, same bytes).
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "cli.h"
#include "commands/commands.h"
#include "commands/preprocess_line.h"
#include "megatron/data/indexed_dataset.h"
#include "megatron/error.h"
#include "megatron/tokenizer/sentence_splitter.h"
#include "megatron/tokenizer/tokenizer.h"

namespace megatron::app {

namespace {

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

struct PreprocessOptions {
  std::string input;
  std::string output_prefix;
  std::vector<std::string> json_keys;
  bool append_eod = false;
  bool split_sentences = false;
  bool keep_newlines = false;
  std::string tokenizer_type;
  TokenizerFiles tokenizer_files;
  int workers = 1;
  int log_interval = 1000;
  std::string on_bad_line = "skip";
  bool strict = false;  // Megatron's behaviour: the first bad line stops the run
};

// A refused input line: exit code 2 (bad input), unlike I/O errors.
class BadLine : public Error {
 public:
  using Error::Error;
};

// Output files are written under temporary names and renamed only when complete, so an
// interrupted or refused run never leaves a half-written dataset under the real name.
class OutputFiles {
 public:
  explicit OutputFiles(const std::string& final_prefix) : final_(final_prefix) {}
  ~OutputFiles() {
    if (committed_) return;
    std::error_code ignored;
    std::filesystem::remove(temporary(bin_path(final_)), ignored);
    std::filesystem::remove(temporary(idx_path(final_)), ignored);
  }
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;

  static std::filesystem::path temporary(const std::filesystem::path& path) {
    return path.string() + ".partial";
  }
  std::filesystem::path temporary_bin() const { return temporary(bin_path(final_)); }
  std::filesystem::path temporary_idx() const { return temporary(idx_path(final_)); }
  const std::string& prefix() const { return final_; }

  // The .idx goes last: a dataset is complete once its .idx exists under the real name.
  void commit() {
    for (const auto& path : {bin_path(final_), idx_path(final_)}) {
      std::error_code error;
      std::filesystem::rename(temporary(path), path, error);
      if (error) throw Error(path.string() + ": cannot rename into place: " + error.message());
    }
    committed_ = true;
  }

 private:
  std::string final_;
  bool committed_ = false;
};

// Progress on stderr: Megatron's "Processed N documents" line every --log-interval documents and,
// on a terminal, a bar redrawn in place.
class Progress {
 public:
  Progress(int log_interval, std::uintmax_t input_bytes)
      : log_interval_(log_interval), input_bytes_(input_bytes), bar_(isatty(STDERR_FILENO) != 0) {}

  void document_done(std::uint64_t documents, std::uint64_t bytes) {
    if (documents % std::uint64_t(log_interval_) == 0) {
      const double elapsed = seconds();
      clear_bar();
      std::cerr << fmt::format("Processed {} documents ({:.1f} docs/s, {:.2f} MB/s).\n", documents,
                               documents / elapsed, bytes / elapsed / 1024 / 1024);
      bar_drawn_at_ = Clock::time_point{};
    }
    documents_ = documents, bytes_ = bytes;
  }

  void draw_bar() {
    if (!bar_ || Clock::now() - bar_drawn_at_ < std::chrono::milliseconds(100)) return;
    bar_drawn_at_ = Clock::now();
    const double fraction =
        input_bytes_ ? std::min(1.0, double(bytes_) / double(input_bytes_)) : 1.0;
    const int width = 30, filled = int(fraction * width);
    std::cerr << fmt::format("\r[{}{}] {:3.0f}%  {} documents  {:.2f} MB/s\033[K",
                             std::string(filled, '#'), std::string(width - filled, '.'),
                             100 * fraction, documents_, bytes_ / seconds() / 1024 / 1024)
              << std::flush;
    shown_ = true;
  }

  void clear_bar() {
    if (shown_) std::cerr << "\r\033[K";
    shown_ = false;
  }

  double seconds() const {
    return std::max(1e-9, std::chrono::duration<double>(Clock::now() - start_).count());
  }

 private:
  int log_interval_;
  std::uintmax_t input_bytes_;
  bool bar_;
  bool shown_ = false;
  Clock::time_point start_ = Clock::now();
  Clock::time_point bar_drawn_at_{};
  std::uint64_t documents_ = 0, bytes_ = 0;
};

// Encodes batches of lines on --workers threads (the calling thread is one of them). Result i
// belongs to line i, so output order is input order whatever the threads' timing. The threads
// live as long as the encoder, so each keeps its tokenizer cache warm from batch to batch.
class BatchEncoder {
 public:
  BatchEncoder(const PreprocessOptions& options, const Tokenizer& tokenizer,
               const SentenceSplitter* splitter)
      : options_(options), tokenizer_(tokenizer), splitter_(splitter) {
    for (int w = 1; w < options.workers; ++w)
      helpers_.emplace_back([this] { help(); });
  }
  ~BatchEncoder() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    batch_ready_.notify_all();
  }
  BatchEncoder(const BatchEncoder&) = delete;
  BatchEncoder& operator=(const BatchEncoder&) = delete;

  std::vector<EncodedLine> encode(const std::vector<std::string>& lines) {
    std::vector<EncodedLine> results(lines.size());
    {
      const std::lock_guard lock(mutex_);
      lines_ = &lines, results_ = &results, next_ = 0, failure_ = nullptr;
      helpers_busy_ = helpers_.size();
      ++batch_;
    }
    batch_ready_.notify_all();
    work();
    std::unique_lock lock(mutex_);
    batch_done_.wait(lock, [&] { return helpers_busy_ == 0; });
    if (failure_) std::rethrow_exception(failure_);
    return results;
  }

 private:
  void help() {
    std::uint64_t batch_seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        batch_ready_.wait(lock, [&] { return stopping_ || batch_ != batch_seen; });
        if (stopping_) return;
        batch_seen = batch_;
      }
      work();
      const std::lock_guard lock(mutex_);
      if (--helpers_busy_ == 0) batch_done_.notify_one();
    }
  }

  void work() {
    try {
      for (std::size_t i = next_++; i < lines_->size(); i = next_++)
        (*results_)[i] = encode_line((*lines_)[i], options_.json_keys, options_.append_eod,
                                     tokenizer_, splitter_);
    } catch (...) {
      next_ = lines_->size();  // the others stop too
      const std::lock_guard lock(mutex_);
      if (!failure_) failure_ = std::current_exception();
    }
  }

  const PreprocessOptions& options_;
  const Tokenizer& tokenizer_;
  const SentenceSplitter* splitter_;  // null without --split-sentences
  std::mutex mutex_;
  std::condition_variable batch_ready_, batch_done_;
  std::uint64_t batch_ = 0;
  std::size_t helpers_busy_ = 0;
  bool stopping_ = false;
  const std::vector<std::string>* lines_ = nullptr;
  std::vector<EncodedLine>* results_ = nullptr;
  std::atomic<std::size_t> next_{0};
  std::exception_ptr failure_;
  std::vector<std::jthread> helpers_;  // last: joined before the state above is destroyed
};

std::string size_text(std::uintmax_t bytes) {
  if (bytes >= 1024 * 1024) return fmt::format("{:.1f} MB", bytes / 1024.0 / 1024.0);
  if (bytes >= 1024) return fmt::format("{:.1f} kB", bytes / 1024.0);
  return fmt::format("{} bytes", bytes);
}

PreprocessOptions parse_options(const std::vector<std::string>& args, bool& help,
                                po::options_description& description) {
  PreprocessOptions o;
  description.add_options()  //
      ("input", po::value(&o.input)->required()->value_name("FILE"),
       "loose JSON: one JSON object per line")  //
      ("output-prefix", po::value(&o.output_prefix)->required()->value_name("P"),
       "writes P_{key}_document.bin and .idx for each JSON key (P_{key}_sentence.* with "
       "--split-sentences)")  //
      ("json-keys",
       po::value(&o.json_keys)->multitoken()->default_value({"text"}, "text")->value_name("KEY..."),
       "keys to extract; each one makes its own dataset. A key's value is a text or a list of "
       "texts, each of which is one sentence (sequence)")  //
      ("split-sentences", po::bool_switch(&o.split_sentences),
       "split each text into sentences (one sequence each) with ICU's English sentence rules; "
       "lists are taken as already split")  //
      ("keep-newlines", po::bool_switch(&o.keep_newlines),
       "with --split-sentences: each sentence keeps the whitespace and newlines that follow it")  //
      ("append-eod", po::bool_switch(&o.append_eod),
       "append the end-of-document token to the last sentence of every non-empty document")  //
      ("tokenizer-type", po::value(&o.tokenizer_type)->required()->value_name("TYPE"),
       "GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase, GPTSentencePieceTokenizer "
       "or SentencePieceTokenizer")  //
      ("vocab-file", po::value(&o.tokenizer_files.vocab_file)->value_name("FILE"),
       "vocabulary (encoder.json for GPT2BPETokenizer, one token per line for WordPiece)")  //
      ("vocab-extra-ids",
       po::value(&o.tokenizer_files.vocab_extra_ids)->default_value(0)->value_name("N"),
       "WordPiece and SentencePieceTokenizer: <extra_id_0..N-1> tokens appended to the "
       "vocabulary (T5's sentinels)")  //
      ("merge-file", po::value(&o.tokenizer_files.merge_file)->value_name("FILE"),
       "BPE merges (vocab.bpe for GPT2BPETokenizer)")  //
      ("tokenizer-model", po::value(&o.tokenizer_files.tokenizer_model)->value_name("FILE"),
       "SentencePiece model (.model) for GPTSentencePieceTokenizer and SentencePieceTokenizer")  //
      ("workers", po::value(&o.workers)->required()->value_name("N"),
       "tokenizer threads; the output does not depend on N")  //
      ("log-interval", po::value(&o.log_interval)->default_value(1000)->value_name("N"),
       "report progress every N documents")  //
      ("on-bad-line", po::value(&o.on_bad_line)->default_value("skip")->value_name("skip|error"),
       "a line that is not a JSON object with the keys as strings or lists of strings is "
       "reported with its line number, then skipped, or refused (exit code 2)")  //
      ("strict", po::bool_switch(&o.strict),
       "stop at the first bad line, naming its file:line (exit code 2), as Megatron-LM's "
       "preprocess_data.py does; the same as --on-bad-line error")  //
      ("help,h", "show this help");
  parse_arguments("preprocess", args, description, help);
  if (help) return o;
  if (o.workers < 1) {
    throw UsageError("megatron-app preprocess: --workers: expected at least 1, found " +
                     std::to_string(o.workers));
  }
  if (o.log_interval < 1) {
    throw UsageError("megatron-app preprocess: --log-interval: expected at least 1, found " +
                     std::to_string(o.log_interval));
  }
  if (o.on_bad_line != "skip" && o.on_bad_line != "error") {
    throw UsageError("megatron-app preprocess: --on-bad-line: expected skip or error, found '" +
                     o.on_bad_line + "'");
  }
  if (o.strict) o.on_bad_line = "error";
  if (o.json_keys.empty()) throw UsageError("megatron-app preprocess: --json-keys: no key given");
  // Megatron accepts --keep-newlines alone and ignores it; here that mistake is pointed out.
  if (o.keep_newlines && !o.split_sentences) {
    throw UsageError(
        "megatron-app preprocess: --keep-newlines applies to sentence splitting; add "
        "--split-sentences (or drop --keep-newlines)");
  }
  return o;
}

struct Totals {
  std::uint64_t documents = 0, sentences = 0, tokens = 0, bytes = 0, bad_lines = 0;
};

Totals preprocess(std::istream& in, const PreprocessOptions& options, const Tokenizer& tokenizer,
                  std::vector<std::unique_ptr<OutputFiles>>& outputs) {
  std::error_code size_error;
  const std::uintmax_t input_bytes = std::filesystem::file_size(options.input, size_error);

  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const auto& output : outputs) {
    writers.push_back(std::make_unique<IndexedDatasetWriter>(
        output->temporary_bin(), optimal_index_dtype(tokenizer.vocab_size())));
  }

  // A batch is encoded in parallel, then written in order. Small batches keep the threads and
  // the progress report busy; the byte bound caps memory on long documents.
  const std::size_t batch_lines = 64 * std::size_t(options.workers);
  const std::size_t batch_bytes = (std::size_t(1) << 20) * std::size_t(options.workers);
  Progress progress(options.log_interval, size_error ? 0 : input_bytes);
  Totals totals;
  std::size_t line_number = 0;
  std::optional<SentenceSplitter> splitter;
  if (options.split_sentences) splitter.emplace(options.keep_newlines);
  BatchEncoder encoder(options, tokenizer, splitter ? &*splitter : nullptr);
  std::vector<std::string> lines;
  std::string line;
  while (in) {
    lines.clear();
    std::size_t bytes_in_batch = 0;
    while (lines.size() < batch_lines && bytes_in_batch < batch_bytes && std::getline(in, line)) {
      bytes_in_batch += line.size() + 1;
      lines.push_back(std::move(line));
    }
    if (in.bad()) throw Error(options.input + ": read error: " + std::strerror(errno));
    const auto results = encoder.encode(lines);
    for (std::size_t i = 0; i < results.size(); ++i) {
      ++line_number;
      totals.bytes += lines[i].size() + 1;
      const EncodedLine& result = results[i];
      if (!result.problem.empty()) {
        const std::string where = options.input + ":" + std::to_string(line_number) + ": ";
        if (options.on_bad_line == "error") throw BadLine(where + result.problem);
        ++totals.bad_lines;
        progress.clear_bar();
        std::cerr << "megatron-app preprocess: " << where << result.problem << "; skipped\n";
        continue;
      }
      for (std::size_t k = 0; k < writers.size(); ++k) {
        writers[k]->add_document(result.documents[k].tokens, result.documents[k].lengths);
        totals.tokens += result.documents[k].tokens.size();
        totals.sentences += result.documents[k].lengths.size();
      }
      progress.document_done(++totals.documents, totals.bytes);
      progress.draw_bar();
    }
  }
  progress.clear_bar();
  // A dataset without a document is of no use to training and hides the problem: nothing is
  // written (the caller reports it).
  if (totals.documents == 0) return totals;
  for (std::size_t k = 0; k < writers.size(); ++k)
    writers[k]->finalize(outputs[k]->temporary_idx());
  for (const auto& output : outputs)
    output->commit();
  return totals;
}

}  // namespace

int run_preprocess(MpiRuntime& runtime, const std::vector<std::string>& args) {
  po::options_description description(
      "megatron-app preprocess --input FILE --output-prefix P --tokenizer-type TYPE --workers N\n"
      "Tokenizes loose JSON (one object per line) into Megatron's indexed dataset\n"
      "P_{key}_document.bin/.idx (P_{key}_sentence.bin/.idx with --split-sentences),\n"
      "byte-compatible with Megatron-LM's tools/preprocess_data.py.\n"
      "Example:\n"
      "  megatron-app preprocess --input data/austen_chapters.jsonl --output-prefix data/austen "
      "\\\n"
      "    --json-keys text --append-eod --tokenizer-type GPT2BPETokenizer \\\n"
      "    --vocab-file data/encoder.json --merge-file data/vocab.bpe --workers 2\n\nOptions");
  bool help = false;
  const PreprocessOptions options = parse_options(args, help, description);
  if (help) {
    std::cout << description << "\n";
    return 0;
  }
  if (runtime.world_size() > 1) {
    throw UsageError(
        "megatron-app preprocess runs as one process (it uses --workers threads); "
        "found " +
        std::to_string(runtime.world_size()) + " MPI ranks");
  }

  std::ifstream in(options.input, std::ios::binary);
  if (!in) throw Error(options.input + ": cannot open: " + std::strerror(errno));
  const auto tokenizer = make_tokenizer(options.tokenizer_type, options.tokenizer_files);
  const auto start = Clock::now();  // rates below are for tokenizing and writing only
  std::vector<std::unique_ptr<OutputFiles>> outputs;
  const std::string level = options.split_sentences ? "sentence" : "document";
  for (const auto& key : options.json_keys)
    outputs.push_back(
        std::make_unique<OutputFiles>(options.output_prefix + "_" + key + "_" + level));

  Totals totals;
  try {
    totals = preprocess(in, options, *tokenizer, outputs);
  } catch (const BadLine& e) {
    outputs.clear();  // removes the partial files before the message
    std::cerr << "megatron-app: error: " << e.what() << std::endl;
    return 2;
  }
  if (totals.documents == 0) {
    outputs.clear();  // removes the temporary files
    std::cerr << "megatron-app: error: " << options.input << ": no document was written ("
              << (totals.bad_lines > 0
                      ? "all " + std::to_string(totals.bad_lines) + " lines were bad, see above"
                      : std::string("the input has no lines"))
              << "); no output files were created" << std::endl;
    return 1;
  }

  const double seconds =
      std::max(1e-9, std::chrono::duration<double>(Clock::now() - start).count());
  const std::string sentences =
      options.split_sentences ? fmt::format("{} sentences, ", totals.sentences) : "";
  std::cout << fmt::format(
      "preprocess: {} documents, {}{} tokens in {:.2f} s ({:.0f} tokens/s, {:.2f} MB/s); {} bad "
      "lines skipped\n",
      totals.documents, sentences, totals.tokens, seconds, totals.tokens / seconds,
      totals.bytes / seconds / 1024 / 1024, totals.bad_lines);
  for (const auto& output : outputs) {
    for (const auto& path : {bin_path(output->prefix()), idx_path(output->prefix())}) {
      std::error_code ignored;
      std::cout << fmt::format("wrote {} ({})\n", path.string(),
                               size_text(std::filesystem::file_size(path, ignored)));
    }
  }
  return 0;
}

}  // namespace megatron::app
