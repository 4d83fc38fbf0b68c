# The [data] settings the query test's workdir is built with (sourced by the tests that use it,
# with $embed_work and $bert_length set): query_settings, --set arguments.
query_settings=(--set 'data.split="10,45,45"' --set "data.retro_bert_max_chunk_length=$bert_length"
  --set data.retro_block_size=500 --set "data.retro_bert_load=$embed_work/bert"
  --set 'data.retro_index_str="IVF16,Flat"' --set data.retro_index_ntrain=1000
  --set data.retro_query_num_neighbors_query=50 --set data.retro_query_nprobe=4)
