// The [data] keys and setup the bert and t5 dataset plugins share.
#include "megatron/data/masked_data_options.h"

#include "megatron/data/masked_samples.h"
#include "megatron/error.h"

namespace megatron::data {

namespace {
std::string absolute(const std::string& path) {
  return std::filesystem::absolute(path).lexically_normal().string();
}
}  // namespace

void declare_sentence_blend_keys(config::TableSchema& schema) {
  declare_blend_keys(
      schema, {"sentence-level dataset prefixes (P.idx/P.bin from `preprocess --split-sentences`) "
               "split by `split`: [\"P\"] or [weight, \"P\", weight, \"Q\", ...]; weights may also "
               "be numbers in strings, as on Megatron's command line",
               "train, valid, test weights over each dataset's documents, e.g. \"949,50,1\""});
}

void read_masked_data_options(const config::ConfigTable& t, MaskedDataOptions& o) {
  o.blends = read_blend_config(t, "megatron-app preprocess --split-sentences");
  o.tokenizer_type = t.string("tokenizer_type");
  o.tokenizer_files.vocab_file = absolute(t.string("vocab_file"));
  o.tokenizer_files.vocab_extra_ids = t.integer("vocab_extra_ids");
  if (t.has("data_cache_path")) o.data_cache_path = absolute(t.string("data_cache_path"));
  o.mid_level_dataset_surplus = t.real("mid_level_dataset_surplus");
}

std::unique_ptr<Tokenizer> open_masked_data_tokenizer(const config::ConfigTable& table,
                                                      const MaskedDataOptions& options) {
  try {
    return make_tokenizer(options.tokenizer_type, options.tokenizer_files);
  } catch (const UsageError& e) {
    table.fail("tokenizer_type", e.what());
  } catch (const Error& e) {
    table.fail("vocab_file", e.what());
  }
}

GptDatasetIdentity masked_dataset_identity(const SentenceMappingRequest& request,
                                           const MaskedDataOptions& options) {
  GptDatasetIdentity identity = request.identity;
  identity.tokenizer = wordpiece_tokenizer_identity(
      options.tokenizer_type == "BertWordPieceLowerCase", options.tokenizer_files.vocab_file,
      options.tokenizer_files.vocab_extra_ids);
  return identity;
}

std::filesystem::path masked_cache_dir(const MaskedDataOptions& options,
                                       const std::string& dataset_prefix,
                                       std::string_view class_name) {
  return options.data_cache_path ? std::filesystem::path(*options.data_cache_path)
                                 : default_masked_cache_dir(dataset_prefix, class_name);
}

}  // namespace megatron::data
