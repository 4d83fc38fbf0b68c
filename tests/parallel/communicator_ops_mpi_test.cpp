// reduce_scatter, all_gather, all_to_all, send/recv and async handles over real MPI groups (run by
// mpirun on 4 and on 3 ranks): the world, a split group of 3 (+ a group of one), and even/odd
// groups.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "megatron/error.h"
#include "megatron/parallel/communicator.h"
#include "megatron/tensor/half.h"
#include "mpi_test_main.h"
#include "parallel/mpi_communicator.h"

namespace megatron {
namespace {

using detail::MpiCommunicator;

constexpr DType kAllDtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                DType::i32, DType::i64, DType::u8};

// Buffers of any dtype, written and read as doubles. Test values are small integers and halves,
// exact in every dtype (bf16 holds integers up to 256), so results can be compared exactly.
class Buffer {
 public:
  Buffer(DType dtype, std::size_t count) : dtype_(dtype), bytes_(count * dtype_size(dtype)) {}

  void set(std::size_t i, double v) {
    std::uint8_t* p = bytes_.data() + i * dtype_size(dtype_);
    switch (dtype_) {
      case DType::f32:
        store(p, static_cast<float>(v));
        break;
      case DType::f64:
        store(p, v);
        break;
      case DType::bf16:
        store(p, bf16::from_float(static_cast<float>(v)));
        break;
      case DType::f16:
        store(p, f16::from_float(static_cast<float>(v)));
        break;
      case DType::i32:
        store(p, static_cast<std::int32_t>(v));
        break;
      case DType::i64:
        store(p, static_cast<std::int64_t>(v));
        break;
      case DType::u8:
        store(p, static_cast<std::uint8_t>(v));
        break;
    }
  }
  double get(std::size_t i) const {
    const std::uint8_t* p = bytes_.data() + i * dtype_size(dtype_);
    switch (dtype_) {
      case DType::f32:
        return load<float>(p);
      case DType::f64:
        return load<double>(p);
      case DType::bf16:
        return static_cast<float>(bf16_of(load<std::uint16_t>(p)));
      case DType::f16:
        return f16::to_float(load<std::uint16_t>(p));
      case DType::i32:
        return load<std::int32_t>(p);
      case DType::i64:
        return static_cast<double>(load<std::int64_t>(p));
      case DType::u8:
        return load<std::uint8_t>(p);
    }
    return 0;
  }
  std::size_t size() const { return bytes_.size() / dtype_size(dtype_); }
  void* data() { return bytes_.data(); }
  void* at(std::size_t i) { return bytes_.data() + i * dtype_size(dtype_); }

 private:
  template <typename T>
  static void store(std::uint8_t* p, T v) {
    std::memcpy(p, &v, sizeof v);
  }
  template <typename T>
  static T load(const std::uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static bf16 bf16_of(std::uint16_t bits) {
    bf16 b;
    b.bits = bits;
    return b;
  }

  DType dtype_;
  std::vector<std::uint8_t> bytes_;
};

bool is_signed(DType d) {
  return d != DType::u8;
}
bool is_float(DType d) {
  return d == DType::f32 || d == DType::f64 || d == DType::bf16 || d == DType::f16;
}

// The value group rank r contributes at logical index i: (r + 1) * base(i). Sums over the group
// are then n(n+1)/2 * base(i), the max and min n * base(i) or base(i) depending on the sign.
double base_value(DType d, std::size_t i) {
  double v = static_cast<double>(i % 12 + 1);
  if (is_signed(d) && i % 2 == 1) v = -v;
  if (is_float(d)) v *= 0.5;
  return v;
}
double expected_reduction(DType d, std::size_t i, int n, ReduceOp op) {
  const double b = base_value(d, i);
  switch (op) {
    case ReduceOp::sum:
      return b * n * (n + 1) / 2;
    case ReduceOp::max:
      return b > 0 ? b * n : b;
    case ReduceOp::min:
      return b > 0 ? b : b * n;
  }
  return 0;
}

// The communicators every test runs on. Each rank gets the world, its part of a split into
// {0, 1, 2} and the rest (a group of one on 4 ranks), and its even/odd group.
struct Groups {
  std::unique_ptr<MpiCommunicator> world;
  std::unique_ptr<MpiCommunicator> first_three;
  std::unique_ptr<MpiCommunicator> parity;

  std::vector<Communicator*> all() const { return {world.get(), first_three.get(), parity.get()}; }
};

Groups make_groups() {
  Groups g;
  g.world = MpiCommunicator::dup_world("world");
  const int me = g.world->rank();
  const int n = g.world->size();
  std::vector<int> three, rest, same_parity;
  for (int r = 0; r < n; ++r) {
    (r < 3 ? three : rest).push_back(r);
    if (r % 2 == me % 2) same_parity.push_back(r);
  }
  const bool in_three = me < 3;
  g.first_three = g.world->split(in_three ? 0 : 1, in_three ? me : me - 3, in_three ? three : rest,
                                 in_three ? "first_three" : "rest");
  g.parity = g.world->split(me % 2, me / 2, same_parity, me % 2 ? "odd" : "even");
  return g;
}

std::string describe(const Communicator& c) {
  return "group " + c.name() + " (rank " + std::to_string(c.rank()) + " of " +
         std::to_string(c.size()) + ")";
}

class CommunicatorOps : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GE(test::mpi_runtime().world_size(), 3) << "run with mpirun -np 3 or more";
    groups_ = make_groups();
  }
  Groups groups_;
};

TEST_F(CommunicatorOps, ReduceScatterEveryDtypeAndOp) {
  constexpr std::size_t kCount = 3;
  for (Communicator* c : groups_.all()) {
    const int n = c->size();
    for (DType d : kAllDtypes) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
        SCOPED_TRACE(describe(*c) + " " + std::string(dtype_name(d)) + " " + reduce_op_name(op));
        Buffer send(d, kCount * n), recv(d, kCount);
        for (std::size_t i = 0; i < send.size(); ++i)
          send.set(i, (c->rank() + 1) * base_value(d, i));
        c->reduce_scatter(send.data(), recv.data(), kCount, d, op);
        for (std::size_t j = 0; j < kCount; ++j) {
          const std::size_t logical = c->rank() * kCount + j;
          EXPECT_EQ(recv.get(j), expected_reduction(d, logical, n, op)) << "element " << j;
        }
      }
    }
  }
}

TEST_F(CommunicatorOps, AllReduceOfHalfFloatsAccumulatesInFloat) {
  for (Communicator* c : groups_.all()) {
    const int n = c->size();
    for (DType d : {DType::bf16, DType::f16}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
        SCOPED_TRACE(describe(*c) + " " + std::string(dtype_name(d)) + " " + reduce_op_name(op));
        Buffer buf(d, 5);
        for (std::size_t i = 0; i < buf.size(); ++i)
          buf.set(i, (c->rank() + 1) * base_value(d, i));
        c->all_reduce(buf.data(), buf.size(), d, op);
        for (std::size_t i = 0; i < buf.size(); ++i) {
          EXPECT_EQ(buf.get(i), expected_reduction(d, i, n, op)) << "element " << i;
        }
      }
    }
  }
}

TEST_F(CommunicatorOps, ReduceScatterInPlaceAtBlockRank) {
  constexpr std::size_t kCount = 4;
  for (Communicator* c : groups_.all()) {
    for (DType d : {DType::f32, DType::bf16, DType::i64}) {
      SCOPED_TRACE(describe(*c) + " " + std::string(dtype_name(d)));
      const int n = c->size();
      Buffer buf(d, kCount * n);
      for (std::size_t i = 0; i < buf.size(); ++i)
        buf.set(i, (c->rank() + 1) * base_value(d, i));
      void* mine = buf.at(c->rank() * kCount);
      c->reduce_scatter(buf.data(), mine, kCount, d, ReduceOp::sum);
      for (std::size_t j = 0; j < kCount; ++j) {
        EXPECT_EQ(buf.get(c->rank() * kCount + j),
                  expected_reduction(d, c->rank() * kCount + j, n, ReduceOp::sum))
            << "element " << j;
      }
    }
  }
}

// Group rank r contributes r * 10 + j (+ 0.5 for floats) at element j of its block.
double gather_value(DType d, int r, std::size_t j) {
  return r * 10 + static_cast<double>(j) + (is_float(d) ? 0.5 : 0.0);
}

TEST_F(CommunicatorOps, AllGatherEveryDtypeOutOfPlaceAndInPlace) {
  constexpr std::size_t kCount = 3;
  for (Communicator* c : groups_.all()) {
    const int n = c->size();
    for (DType d : kAllDtypes) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(describe(*c) + " " + std::string(dtype_name(d)) +
                     (in_place ? " in place" : ""));
        Buffer send(d, kCount), recv(d, kCount * n);
        for (std::size_t i = 0; i < recv.size(); ++i)
          recv.set(i, 99);  // overwritten or kept
        Buffer& src = in_place ? recv : send;
        const std::size_t offset = in_place ? c->rank() * kCount : 0;
        for (std::size_t j = 0; j < kCount; ++j)
          src.set(offset + j, gather_value(d, c->rank(), j));
        c->all_gather(src.at(offset), recv.data(), kCount, d);
        for (int r = 0; r < n; ++r) {
          for (std::size_t j = 0; j < kCount; ++j) {
            EXPECT_EQ(recv.get(r * kCount + j), gather_value(d, r, j)) << "block " << r;
          }
        }
      }
    }
  }
}

// Uneven blocks, as MoE's token dispatch sends them: rank p sends (p + q) % 3 elements to rank q
// (so some pairs exchange nothing, the rank itself included), element j of block p -> q holding
// 10 p + q + 50 j (exact in every dtype, u8 and bf16 included). Every dtype; the asynchronous
// form too.
std::size_t uneven_count(int from, int to) {
  return static_cast<std::size_t>((from + to) % 3);
}
double uneven_value(int from, int to, std::size_t j) {
  return 10.0 * from + to + 50.0 * static_cast<double>(j);
}

TEST_F(CommunicatorOps, AllToAllUnevenBlocksEveryDtype) {
  for (Communicator* c : groups_.all()) {
    const int n = c->size(), me = c->rank();
    std::vector<std::size_t> send_counts, recv_counts;
    for (int r = 0; r < n; ++r) {
      send_counts.push_back(uneven_count(me, r));
      recv_counts.push_back(uneven_count(r, me));
    }
    std::size_t sent = 0, received = 0;
    for (int r = 0; r < n; ++r) {
      sent += send_counts[r];
      received += recv_counts[r];
    }
    for (DType d : kAllDtypes) {
      for (bool async : {false, true}) {
        SCOPED_TRACE(describe(*c) + " " + std::string(dtype_name(d)) + (async ? " async" : ""));
        Buffer send(d, sent + 1), recv(d, received + 1);
        std::size_t at = 0;
        for (int r = 0; r < n; ++r) {
          for (std::size_t j = 0; j < send_counts[r]; ++j)
            send.set(at++, uneven_value(me, r, j));
        }
        recv.set(received, 77);  // past the last block: untouched
        if (async) {
          CommHandle h =
              c->all_to_all_v_async(send.data(), send_counts, recv.data(), recv_counts, d);
          h.wait();
        } else {
          c->all_to_all_v(send.data(), send_counts, recv.data(), recv_counts, d);
        }
        at = 0;
        for (int r = 0; r < n; ++r) {
          for (std::size_t j = 0; j < recv_counts[r]; ++j)
            EXPECT_EQ(recv.get(at++), uneven_value(r, me, j)) << "block from " << r << " at " << j;
        }
        EXPECT_EQ(recv.get(received), 77);
      }
    }
  }
}

TEST_F(CommunicatorOps, AllToAllEqualBlocks) {
  Communicator& world = *groups_.world;
  const int n = world.size(), me = world.rank();
  std::vector<std::int64_t> send(static_cast<std::size_t>(2 * n)), recv(send.size(), -1);
  for (int r = 0; r < n; ++r) {
    send[static_cast<std::size_t>(2 * r)] = 100 * me + r;
    send[static_cast<std::size_t>(2 * r + 1)] = -(100 * me + r);
  }
  world.all_to_all(send.data(), recv.data(), 2, DType::i64);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(recv[static_cast<std::size_t>(2 * r)], 100 * r + me);
    EXPECT_EQ(recv[static_cast<std::size_t>(2 * r + 1)], -(100 * r + me));
  }
}

// Every rank sends two tagged messages to the next rank and receives them from the previous one,
// posting the receives in the opposite tag order: messages match by tag, not by arrival.
TEST_F(CommunicatorOps, SendRecvRingMatchesByTag) {
  for (Communicator* c : groups_.all()) {
    SCOPED_TRACE(describe(*c));
    const int n = c->size();
    if (n == 1) continue;  // refused, see ArgumentErrors
    const int next = (c->rank() + 1) % n;
    const int prev = (c->rank() + n - 1) % n;
    const std::vector<double> a = {c->rank() + 0.25, -1.0 * c->rank()};
    const std::vector<std::int32_t> b = {100 + c->rank(), 200 + c->rank(), 300 + c->rank()};
    std::vector<double> got_a(2, 0.0);
    std::vector<std::int32_t> got_b(3, 0);
    CommHandle sa = c->send_async(a.data(), a.size(), DType::f64, next, /*tag=*/7);
    CommHandle sb = c->send_async(b.data(), b.size(), DType::i32, next, /*tag=*/3);
    CommHandle rb = c->recv_async(got_b.data(), got_b.size(), DType::i32, prev, /*tag=*/3);
    CommHandle ra = c->recv_async(got_a.data(), got_a.size(), DType::f64, prev, /*tag=*/7);
    ra.wait();
    sb.wait();
    rb.wait();
    sa.wait();
    EXPECT_EQ(got_a, (std::vector<double>{prev + 0.25, -1.0 * prev}));
    EXPECT_EQ(got_b, (std::vector<std::int32_t>{100 + prev, 200 + prev, 300 + prev}));

    // Blocking forms, 16-bit floats as bits, and two messages of one tag arriving in order.
    // Even ranks send first and odd ranks receive first, so the blocking ring cannot deadlock.
    const std::uint16_t first[2] = {static_cast<std::uint16_t>(c->rank()), 0x3f80};
    const std::uint16_t second[1] = {static_cast<std::uint16_t>(0x4000 + c->rank())};
    std::uint16_t got_first[2] = {}, got_second[1] = {};
    auto send_both = [&] {
      c->send(first, 2, DType::bf16, next);
      c->send(second, 1, DType::f16, next);
    };
    auto recv_both = [&] {
      c->recv(got_first, 2, DType::bf16, prev);
      c->recv(got_second, 1, DType::f16, prev);
    };
    if (c->rank() % 2 == 0) {
      send_both();
      recv_both();
    } else {
      recv_both();
      send_both();
    }
    EXPECT_EQ(got_first[0], prev);
    EXPECT_EQ(got_first[1], 0x3f80);
    EXPECT_EQ(got_second[0], 0x4000 + prev);
  }
}

TEST_F(CommunicatorOps, SeveralOutstandingHandlesWaitedOutOfOrder) {
  for (Communicator* c : groups_.all()) {
    SCOPED_TRACE(describe(*c));
    const int n = c->size();
    std::vector<float> reduced = {static_cast<float>(c->rank() + 1), 2.0f};
    std::vector<std::int32_t> rs_send(2 * n), rs_recv(2, -1);
    for (int i = 0; i < 2 * n; ++i)
      rs_send[i] = i * (c->rank() + 1);
    const std::vector<double> ag_send = {c->rank() * 1.5};
    std::vector<double> ag_recv(n, -1.0);
    std::vector<std::int64_t> maxed = {c->rank() * 7, -c->rank()};

    std::vector<CommHandle> handles;
    handles.push_back(c->all_reduce_async(reduced.data(), 2, DType::f32, ReduceOp::sum));
    handles.push_back(
        c->reduce_scatter_async(rs_send.data(), rs_recv.data(), 2, DType::i32, ReduceOp::sum));
    handles.push_back(c->all_gather_async(ag_send.data(), ag_recv.data(), 1, DType::f64));
    handles.push_back(c->all_reduce_async(maxed.data(), 2, DType::i64, ReduceOp::max));
    // Drive one to completion by polling, then wait the rest last to first.
    while (!handles[1].test()) {
    }
    EXPECT_TRUE(handles[1].completed());
    for (auto it = handles.rbegin(); it != handles.rend(); ++it)
      it->wait();

    const int tri = n * (n + 1) / 2;
    EXPECT_EQ(reduced, (std::vector<float>{static_cast<float>(tri), 2.0f * n}));
    EXPECT_EQ(rs_recv, (std::vector<std::int32_t>{2 * c->rank() * tri, (2 * c->rank() + 1) * tri}));
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(ag_recv[r], r * 1.5);
    EXPECT_EQ(maxed, (std::vector<std::int64_t>{(n - 1) * 7, 0}));
  }
}

TEST_F(CommunicatorOps, HandleDestructorWaits) {
  for (Communicator* c : groups_.all()) {
    SCOPED_TRACE(describe(*c));
    const int n = c->size();
    std::vector<std::int32_t> gathered(n, -1);
    const std::int32_t mine = 10 + c->rank();
    std::vector<float> sum = {1.0f};
    {
      CommHandle g = c->all_gather_async(&mine, gathered.data(), 1, DType::i32);
      CommHandle s = c->all_reduce_async(sum.data(), 1, DType::f32, ReduceOp::sum);
      // Neither is waited: leaving the scope must complete both.
    }
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(gathered[r], 10 + r);
    EXPECT_EQ(sum[0], static_cast<float>(n));
    if (n == 1) continue;
    // A pending receive, replaced by assignment: the old one completes first.
    const int next = (c->rank() + 1) % n;
    const int prev = (c->rank() + n - 1) % n;
    std::int64_t in = -1;
    const std::int64_t out = 1000 + c->rank();
    {
      CommHandle sending = c->send_async(&out, 1, DType::i64, next, 11);
      CommHandle receiving = c->recv_async(&in, 1, DType::i64, prev, 11);
      receiving = CommHandle();
      EXPECT_EQ(in, 1000 + prev);
    }
  }
}

TEST_F(CommunicatorOps, CountZeroDoesNothing) {
  for (Communicator* c : groups_.all()) {
    SCOPED_TRACE(describe(*c));
    // Only some ranks call: with count 0 nothing is exchanged, so nobody waits for the others.
    if (c->rank() == 0) {
      EXPECT_TRUE(
          c->reduce_scatter_async(nullptr, nullptr, 0, DType::f32, ReduceOp::sum).completed());
      c->all_gather(nullptr, nullptr, 0, DType::bf16);
      if (c->size() > 1) c->send(nullptr, 0, DType::f32, 1, 5);
    }
    c->barrier();
  }
}

using testing::expect_error_message;

TEST_F(CommunicatorOps, ArgumentErrors) {
  Communicator& world = *groups_.world;
  const int n = world.size();
  const std::string sz = std::to_string(n);
  float x[8] = {};
  expect_error_message([&] { world.send(x, 1, DType::f32, n); },
                       "send on the world group: peer " + sz + " is outside the group of size " +
                           sz + " (expected 0.." + std::to_string(n - 1) + ")");
  expect_error_message(
      [&] { (void)world.recv_async(x, 1, DType::f32, world.rank()); },
      "recv on the world group: peer " + std::to_string(world.rank()) + " is this rank itself");
  expect_error_message([&] { world.send(x, 1, DType::f32, (world.rank() + 1) % n, -2); },
                       "send on the world group: tag -2 is negative");
  int* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
  ASSERT_TRUE(found);
  if (*tag_ub < INT32_MAX) {
    expect_error_message([&] { world.recv(x, 1, DType::f32, (world.rank() + 1) % n, *tag_ub + 1); },
                         "recv on the world group: tag " + std::to_string(*tag_ub + 1) +
                             " exceeds MPI_TAG_UB (" + std::to_string(*tag_ub) + ")");
  }
  expect_error_message([&] { world.send(nullptr, 3, DType::f32, (world.rank() + 1) % n); },
                       "send on the world group: the buffer is null but count is 3");
  // Blocks of 2 floats: x + 1 straddles blocks 0 and 1, never a rank's own block.
  expect_error_message(
      [&] { world.reduce_scatter(x, x + 1, 2, DType::f32, ReduceOp::sum); },
      "reduce_scatter on the world group: the send and recv buffers overlap; the rank's "
      "block may only alias the full buffer at block rank() (" +
          std::to_string(world.rank()) + ")");
  const std::vector<std::size_t> too_few(static_cast<std::size_t>(n - 1), 1);
  const std::vector<std::size_t> ones(static_cast<std::size_t>(n), 1);
  expect_error_message([&] { world.all_to_all_v(x, too_few, x + 4, ones, DType::f32); },
                       "all_to_all on the world group: " + std::to_string(n - 1) + " send and " +
                           sz + " recv counts for a group of " + sz);
  expect_error_message([&] { world.all_to_all_v(nullptr, ones, x, ones, DType::f32); },
                       "all_to_all on the world group: the send buffer is null but count is " + sz);
  expect_error_message([&] { world.all_to_all_v(x, ones, x + 1, ones, DType::f32); },
                       "all_to_all on the world group: the send and recv buffers overlap");
  // A group of one has nobody to talk to.
  Communicator& three = *groups_.first_three;
  if (three.size() == 1) {
    expect_error_message(
        [&] { three.send(x, 1, DType::f32, 0); },
        "send on the rest group: peer 0 is this rank itself (a group of one has no other "
        "member)");
  }
  // Nothing was exchanged by the refused calls, so the ranks are still in step.
  EXPECT_EQ(world.all_reduce_value(std::int32_t{1}), n);
}

TEST_F(CommunicatorOps, ReceivedCountMustMatch) {
  Communicator& world = *groups_.world;
  double buf[4] = {1, 2, 3, 4};
  if (world.rank() == 0) world.send(buf, 3, DType::f64, 1, 9);
  if (world.rank() == 1) {
    expect_error_message(
        [&] { world.recv(buf, 4, DType::f64, 0, 9); },
        "recv from peer 0 with tag 9 on the world group: expected 4 elements, the message "
        "held 3 (sender and receiver counts must match)");
  }
  world.barrier();
}

}  // namespace
}  // namespace megatron
