// Packing: documents into fixed-length rows with their boundaries kept. Every batch built here
// goes through check_invariants, which re-derives what each tensor must hold from the
// documents' spans alone; the end-to-end test runs packed rows through fixture models.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "tandem/core/error.h"
#include "tandem/data/packing.h"
#include "tandem/models/decoder.h"
#include "tandem/models/frozen.h"
#include "test_util.h"

namespace {

using tandem::OverlongPolicy;
using tandem::PackedBatch;
using tandem::PackingMode;
using tandem::PackingOptions;
using tandem::TokenizedDocument;

/// A document of `length` tokens with ids drawn from `state` in [1, vocab) and a loss mask
/// that is 0 on the first third (a "prompt") and 1 after.
TokenizedDocument make_document(int64_t length, uint64_t& state, int64_t vocab,
                                const std::string& source) {
  TokenizedDocument document;
  document.source = source;
  for (int64_t t = 0; t < length; ++t) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    document.ids.push_back(static_cast<int32_t>(1 + (state >> 33) % (vocab - 1)));
    document.loss_mask.push_back(t >= length / 3 ? 1 : 0);
  }
  return document;
}

std::vector<TokenizedDocument> make_documents(const std::vector<int64_t>& lengths,
                                              int64_t vocab = 512, uint64_t seed = 1) {
  std::vector<TokenizedDocument> documents;
  for (size_t i = 0; i < lengths.size(); ++i)
    documents.push_back(
        make_document(lengths[i], seed, vocab, "docs.jsonl:" + std::to_string(i + 1)));
  return documents;
}

PackingOptions packing(int64_t seq_len, OverlongPolicy overlong = OverlongPolicy::Split,
                       PackingMode mode = PackingMode::Packed) {
  PackingOptions options;
  options.seq_len = seq_len;
  options.overlong = overlong;
  options.mode = mode;
  options.pad_id = 0;
  return options;
}

/// Checks every convention of packing.h on `batch`, from the document spans alone.
void check_invariants(const PackedBatch& batch, const std::vector<TokenizedDocument>& documents,
                      const PackingOptions& options) {
  const int64_t rows = batch.rows(), length = batch.seq_len();
  ASSERT_EQ(batch.input_ids.scalar_type(), at::kLong);
  ASSERT_EQ(batch.position_ids.scalar_type(), at::kLong);
  ASSERT_EQ(batch.document_ids.scalar_type(), at::kLong);
  ASSERT_EQ(batch.loss_mask.scalar_type(), at::kByte);
  ASSERT_EQ(batch.cu_seqlens.scalar_type(), at::kInt);
  for (const at::Tensor* tensor :
       {&batch.position_ids, &batch.document_ids, &batch.loss_mask, &batch.padding_mask})
    ASSERT_EQ(tensor->sizes(), batch.input_ids.sizes());
  if (!options.trim_to_longest) {
    ASSERT_EQ(length, options.seq_len);
  }
  const auto ids = batch.input_ids.accessor<int64_t, 2>();
  const auto positions = batch.position_ids.accessor<int64_t, 2>();
  const auto document_ids = batch.document_ids.accessor<int64_t, 2>();
  const auto loss_mask = batch.loss_mask.accessor<uint8_t, 2>();
  const auto padding_mask = batch.padding_mask.accessor<uint8_t, 2>();
  const auto num_documents = batch.num_documents.accessor<int64_t, 1>();
  const at::Tensor global = batch.global_document_ids();
  const auto global_ids = global.accessor<int64_t, 2>();

  // (row, column) -> start column of the span it belongs to (padding: the last document's).
  std::vector<std::vector<int64_t>> span_start(rows, std::vector<int64_t>(length, -1));
  std::vector<int32_t> expected_cu{0};
  int64_t tokens = 0, loss_tokens = 0;
  size_t next = 0;  // index into batch.documents
  for (int64_t b = 0; b < rows; ++b) {
    int64_t column = 0, in_row = 0, last_start = 0, last_length = 0;
    while (next < batch.documents.size() && batch.documents[next].row == b) {
      const auto& span = batch.documents[next];
      const TokenizedDocument& source = documents[span.source_index];
      ASSERT_EQ(span.begin, column) << "documents must sit back to back from column 0";
      if (in_row > 0) expected_cu.push_back(static_cast<int32_t>(b * length + span.begin));
      for (int64_t k = 0; k < span.length; ++k) {
        const int64_t t = span.begin + k;
        EXPECT_EQ(ids[b][t], source.ids[span.source_begin + k]);
        EXPECT_EQ(positions[b][t], k) << "positions restart per document";
        EXPECT_EQ(document_ids[b][t], in_row);
        EXPECT_EQ(global_ids[b][t], static_cast<int64_t>(next));
        EXPECT_EQ(loss_mask[b][t], source.loss_mask[span.source_begin + k]);
        EXPECT_EQ(padding_mask[b][t], 1);
        span_start[b][t] = span.begin;
        loss_tokens += loss_mask[b][t];
      }
      tokens += span.length;
      last_start = span.begin;
      last_length = span.length;
      column += span.length;
      ++in_row;
      ++next;
    }
    ASSERT_GE(in_row, 1) << "row " << b << " is empty";
    EXPECT_EQ(num_documents[b], in_row) << "padding never counts as a document";
    for (int64_t t = column; t < length; ++t) {
      EXPECT_EQ(ids[b][t], options.pad_id);
      EXPECT_EQ(loss_mask[b][t], 0) << "loss on padding";
      EXPECT_EQ(padding_mask[b][t], 0);
      EXPECT_EQ(document_ids[b][t], in_row - 1) << "padding clamped onto the last real document";
      EXPECT_EQ(positions[b][t], last_length + (t - column));
      span_start[b][t] = last_start;
    }
    expected_cu.push_back(static_cast<int32_t>((b + 1) * length));
  }
  EXPECT_EQ(next, batch.documents.size());
  EXPECT_EQ(batch.total_documents(), batch.num_documents.sum().item<int64_t>());
  EXPECT_EQ(batch.num_tokens, tokens);
  EXPECT_EQ(batch.num_loss_tokens, loss_tokens);
  EXPECT_EQ(batch.num_loss_tokens, batch.loss_mask.sum().item<int64_t>());
  EXPECT_LT(global.max().item<int64_t>(), batch.total_documents());
  EXPECT_LT((batch.document_ids - batch.num_documents.unsqueeze(1)).max().item<int64_t>(), 0)
      << "a document id past the row's last document";

  const at::Tensor cu = batch.cu_seqlens.contiguous();
  EXPECT_EQ(std::vector<int32_t>(cu.data_ptr<int32_t>(), cu.data_ptr<int32_t>() + cu.numel()),
            expected_cu);
  int64_t longest = 0;
  for (size_t i = 1; i < expected_cu.size(); ++i)
    longest = std::max<int64_t>(longest, expected_cu[i] - expected_cu[i - 1]);
  EXPECT_EQ(batch.max_seqlen, longest);

  // The decoder's mask: a query sees exactly the keys of its own span up to itself.
  const at::Tensor mask = tandem::attention_mask(batch.layout(), 0);  // (B, 1, T, T)
  ASSERT_EQ(mask.sizes(), at::IntArrayRef({rows, 1, length, length}));
  const auto allowed = mask.accessor<bool, 4>();
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t q = 0; q < length; ++q)
      for (int64_t k = 0; k < length; ++k)
        ASSERT_EQ(allowed[b][0][q][k], k <= q && k >= span_start[b][q])
            << "row " << b << " query " << q << " key " << k;
}

TEST(Packing, FirstFitInOrder) {
  // T = 10: 5 -> row 0 (5 left); 7 -> row 1 (3 left); 3 -> row 0 (2 left); 6 -> row 2; 2 -> row 0.
  const auto plan = tandem::plan_packing({5, 7, 3, 6, 2}, packing(10));
  ASSERT_EQ(plan.rows.size(), 3u);
  auto sources = [&](size_t row) {
    std::vector<int64_t> result;
    for (const auto& piece : plan.rows[row]) result.push_back(piece.source_index);
    return result;
  };
  EXPECT_EQ(sources(0), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(sources(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(sources(2), (std::vector<int64_t>{3}));
  EXPECT_EQ(plan.documents_consumed, 5);
}

TEST(Packing, InvariantsAcrossModesAndPolicies) {
  const std::vector<int64_t> lengths = {5, 16, 3, 9, 1, 23, 7, 2, 12, 4, 40, 6};
  const auto documents = make_documents(lengths);
  for (const auto mode : {PackingMode::Packed, PackingMode::Padded})
    for (const auto overlong : {OverlongPolicy::Split, OverlongPolicy::Truncate})
      for (const bool trim : {false, true}) {
        SCOPED_TRACE(testing::Message() << "mode " << static_cast<int>(mode) << " overlong "
                                        << static_cast<int>(overlong) << " trim " << trim);
        PackingOptions options = packing(16, overlong, mode);
        options.trim_to_longest = trim;
        options.pad_id = 7;
        const PackedBatch batch = tandem::pack_documents(documents, options);
        check_invariants(batch, documents, options);
        EXPECT_EQ(batch.documents_consumed, static_cast<int64_t>(documents.size()));
        if (mode == PackingMode::Padded) {
          EXPECT_EQ(batch.total_documents(), batch.rows()) << "one document per row";
        }
      }
}

TEST(Packing, SplitChunksRestartPositions) {
  const auto documents = make_documents({23, 4});
  const PackedBatch batch = tandem::pack_documents(documents, packing(10));
  check_invariants(batch, documents, packing(10));
  // Chunks of 10, 10, 3; the 3-token tail and the 4-token document share row 2.
  ASSERT_EQ(batch.total_documents(), 4);
  const std::vector<int64_t> begins = {0, 10, 20};
  for (int64_t chunk = 0; chunk < 3; ++chunk) {
    const auto& span = batch.documents[chunk];
    EXPECT_EQ(span.source_index, 0);
    EXPECT_EQ(span.chunk, chunk);
    EXPECT_EQ(span.source_begin, begins[chunk]);
    EXPECT_EQ(span.row, chunk);
    EXPECT_EQ(batch.position_ids[chunk][0].item<int64_t>(), 0);
  }
  EXPECT_EQ(batch.documents[3].row, 2);
  EXPECT_EQ(batch.documents[3].begin, 3);
  EXPECT_EQ(batch.num_documents[2].item<int64_t>(), 2);
  EXPECT_EQ(batch.truncated_tokens, 0);
}

TEST(Packing, TruncateKeepsThePrefix) {
  const auto documents = make_documents({23, 4});
  const PackedBatch batch =
      tandem::pack_documents(documents, packing(10, OverlongPolicy::Truncate));
  check_invariants(batch, documents, packing(10, OverlongPolicy::Truncate));
  EXPECT_EQ(batch.truncated_tokens, 13);
  ASSERT_EQ(batch.total_documents(), 2);
  EXPECT_EQ(batch.documents[0].length, 10);
  EXPECT_EQ(batch.num_tokens, 14);
}

TEST(Packing, ErrorPolicyNamesTheDocument) {
  const auto documents = make_documents({4, 11});
  try {
    tandem::pack_documents(documents, packing(10, OverlongPolicy::Error));
    FAIL() << "no error";
  } catch (const tandem::Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("docs.jsonl:2"), std::string::npos) << message;
    EXPECT_NE(message.find("11 tokens"), std::string::npos) << message;
  }
  EXPECT_NO_THROW(
      tandem::pack_documents(make_documents({4, 10}), packing(10, OverlongPolicy::Error)));
}

TEST(Packing, MaxRowsPacksAPrefix) {
  PackingOptions options = packing(10);
  options.max_rows = 2;
  const auto documents = make_documents({6, 6, 6, 3});
  const PackedBatch batch = tandem::pack_documents(documents, options);
  // The third document needs a third row, so packing stops there even though the fourth would
  // fit: the consumed documents stay a prefix, which a sampler position can resume after.
  EXPECT_EQ(batch.documents_consumed, 2);
  EXPECT_EQ(batch.rows(), 2);
  check_invariants(batch, documents, options);
  // A document that could never fit in max_rows rows is an error, not an endless loop.
  EXPECT_THROW(tandem::pack_documents(make_documents({25}), options), tandem::Error);
  options.overlong = OverlongPolicy::Truncate;
  const PackedBatch truncated = tandem::pack_documents(make_documents({12, 15, 14}), options);
  EXPECT_EQ(truncated.documents_consumed, 2);
  EXPECT_EQ(truncated.truncated_tokens, 7);  // the unplaced third document is not counted
}

TEST(Packing, PaddingOnlyRowTailNeverADocument) {
  // Row 0 full (10), row 1 has 4 tokens and 6 padding.
  const auto documents = make_documents({10, 4});
  const PackedBatch batch = tandem::pack_documents(documents, packing(10));
  check_invariants(batch, documents, packing(10));
  EXPECT_EQ(batch.num_documents[0].item<int64_t>(), 1);
  EXPECT_EQ(batch.num_documents[1].item<int64_t>(), 1);
  EXPECT_EQ(batch.document_ids[1].max().item<int64_t>(), 0);
  EXPECT_EQ(batch.global_document_ids()[1][9].item<int64_t>(), 1);
  EXPECT_EQ(batch.loss_mask[1].narrow(0, 4, 6).sum().item<int64_t>(), 0);
}

TEST(Packing, BadInputIsAnError) {
  auto documents = make_documents({3, 0});
  EXPECT_THROW(tandem::pack_documents(documents, packing(8)), tandem::Error);
  documents = make_documents({3});
  documents[0].loss_mask.pop_back();
  EXPECT_THROW(tandem::pack_documents(documents, packing(8)), tandem::Error);
  EXPECT_THROW(tandem::pack_documents({}, packing(8)), tandem::Error);
  EXPECT_THROW(tandem::pack_documents(make_documents({3}), packing(0)), tandem::Error);
  EXPECT_EQ(tandem::parse_overlong_policy("split"), OverlongPolicy::Split);
  EXPECT_EQ(tandem::parse_overlong_policy("truncate"), OverlongPolicy::Truncate);
  EXPECT_EQ(tandem::parse_overlong_policy("error"), OverlongPolicy::Error);
  EXPECT_THROW(tandem::parse_overlong_policy("drop"), tandem::Error);
  EXPECT_EQ(tandem::parse_packing_mode("padded"), PackingMode::Padded);
  EXPECT_THROW(tandem::parse_packing_mode("dense"), tandem::Error);
}

// End to end: a packed batch through a fixture model gives, for every document, the logits of
// that document run alone (fp32). Mistral's fixture has a sliding window of 6, smaller than
// some documents, so the window and the document boundaries are tested together.
class PackedForward : public ::testing::TestWithParam<std::string> {};

TEST_P(PackedForward, EqualsDocumentsRunSeparately) {
  const auto model =
      tandem::FrozenModel::load(tandem::testing::model_fixture(GetParam()), at::kFloat, at::kCPU);
  const auto documents = make_documents({5, 9, 4, 7, 3, 11}, model.config().vocab_size, 3);
  const PackedBatch batch = tandem::pack_documents(documents, packing(16));
  ASSERT_GT(batch.total_documents(), batch.rows()) << "the test needs several documents per row";
  const auto packed = model.forward(batch.input_ids, batch.layout(), {}).logits;  // (B, T, V)
  // Negative control: the same rows with plain causal attention let documents see each other.
  const auto leaky =
      model
          .forward(batch.input_ids, tandem::AttentionLayout::causal(batch.rows(), 16, at::kCPU), {})
          .logits;
  double worst = 0, leak = 0;
  for (const auto& span : batch.documents) {
    const auto& ids = documents[span.source_index].ids;
    const at::Tensor alone_ids =
        at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).unsqueeze(0);
    const auto alone =
        model.forward(alone_ids, tandem::AttentionLayout::causal(1, span.length, at::kCPU), {})
            .logits;
    const at::Tensor slice = packed[span.row].narrow(0, span.begin, span.length);
    worst = std::max(worst, (slice - alone[0]).abs().max().item<double>());
    const at::Tensor leaky_slice = leaky[span.row].narrow(0, span.begin, span.length);
    leak = std::max(leak, (leaky_slice - alone[0]).abs().max().item<double>());
  }
  std::printf("[packing] %s: packed vs separate max|diff| %.3g (no document mask: %.3g)\n",
              GetParam().c_str(), worst, leak);
  // Same fp32 tolerance as the transformers parity tests; a leak is orders of magnitude larger.
  EXPECT_LE(worst, 1e-4) << GetParam();
  EXPECT_GT(leak, 1e-2) << "the check cannot see a cross-document leak";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PackedForward,
                         ::testing::Values("llama3", "mistral", "qwen2", "qwen3"));

}  // namespace
