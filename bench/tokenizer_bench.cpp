// GPT-2 BPE throughput: loading the vocabulary, encoding real text (cold and warm piece cache),
// decoding. Data: the bundled data/ folder, found next to this file.
#include <filesystem>
#include <fstream>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "megatron/tokenizer/gpt2_bpe_tokenizer.h"

namespace {

const std::filesystem::path kRepo = std::filesystem::path(__FILE__).parent_path().parent_path();

// The Austen corpus as plain text (the "text" of every JSON line), about 3.9 MB.
const std::string& corpus() {
  static const std::string text = [] {
    std::ifstream in(kRepo / "data" / "austen_chapters.jsonl");
    std::string line, all;
    while (std::getline(in, line))
      all += nlohmann::json::parse(line).at("text").get<std::string>() + "\n";
    return all;
  }();
  return text;
}

const megatron::Gpt2BpeTokenizer& tokenizer() {
  static const megatron::Gpt2BpeTokenizer instance(kRepo / "data" / "encoder.json",
                                                   kRepo / "data" / "vocab.bpe");
  return instance;
}

void BM_LoadVocabulary(benchmark::State& state) {
  for (auto _ : state) {
    megatron::Gpt2BpeTokenizer loaded(kRepo / "data" / "encoder.json",
                                      kRepo / "data" / "vocab.bpe");
    benchmark::DoNotOptimize(loaded.vocab_size());
  }
}
BENCHMARK(BM_LoadVocabulary)->Unit(benchmark::kMillisecond);

// Each iteration uses a fresh tokenizer instance, so its thread's piece cache starts empty.
void BM_EncodeCorpusColdCache(benchmark::State& state) {
  const std::string& text = corpus();
  std::vector<megatron::TokenId> ids;
  for (auto _ : state) {
    state.PauseTiming();
    megatron::Gpt2BpeTokenizer fresh(kRepo / "data" / "encoder.json", kRepo / "data" / "vocab.bpe");
    ids.clear();
    state.ResumeTiming();
    fresh.encode(text, ids);
  }
  state.SetBytesProcessed(std::int64_t(state.iterations() * text.size()));
  state.counters["tokens/s"] =
      benchmark::Counter(double(ids.size() * state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EncodeCorpusColdCache)->Unit(benchmark::kMillisecond);

void BM_EncodeCorpusWarmCache(benchmark::State& state) {
  const std::string& text = corpus();
  std::vector<megatron::TokenId> ids;
  tokenizer().encode(text, ids);
  for (auto _ : state) {
    ids.clear();
    tokenizer().encode(text, ids);
  }
  state.SetBytesProcessed(std::int64_t(state.iterations() * text.size()));
  state.counters["tokens/s"] =
      benchmark::Counter(double(ids.size() * state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EncodeCorpusWarmCache)->Unit(benchmark::kMillisecond);

void BM_DecodeCorpus(benchmark::State& state) {
  const auto ids = tokenizer().encode(corpus());
  for (auto _ : state)
    benchmark::DoNotOptimize(tokenizer().decode(ids));
  state.SetBytesProcessed(std::int64_t(state.iterations() * corpus().size()));
}
BENCHMARK(BM_DecodeCorpus)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
