#include "pdkvs/loadgen/verifier.h"

#include <gtest/gtest.h>

namespace pdpm::pdkvs::loadgen {
namespace {

class VerifierTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(WorkloadByName("sys", &workload_).ok()); }
  static Reply Ok() { return Reply{ReplyType::kSimple, "OK"}; }
  Reply Bulk(const std::string& value) { return Reply{ReplyType::kBulk, value}; }
  // A SET of key sent and acknowledged: its write number.
  uint64_t Acked(uint64_t key) {
    uint64_t w = verifier_.WriteSent(key);
    EXPECT_EQ(verifier_.WriteAnswered(key, w, Ok()), "");
    return w;
  }
  // The check of a GET of key whose reply is write w's value.
  std::string ReadOf(uint64_t key, uint64_t floor, uint64_t w) {
    value_ = workload_.Value(w);
    return verifier_.CheckRead(key, floor, Bulk(value_));
  }

  Workload workload_;
  Verifier verifier_{workload_, 10, 1000};
  std::string value_;
};

TEST_F(VerifierTest, AcknowledgedWriteIsRead) {
  uint64_t w = Acked(3);
  EXPECT_EQ(ReadOf(3, verifier_.ReadSent(3), w), "");
}

TEST_F(VerifierTest, WriteInFlightMayOrMayNotBeSeen) {
  uint64_t w1 = Acked(3);
  uint64_t w2 = verifier_.WriteSent(3);
  uint64_t floor = verifier_.ReadSent(3);
  EXPECT_EQ(ReadOf(3, floor, w1), "");
  EXPECT_EQ(ReadOf(3, floor, w2), "");
}

TEST_F(VerifierTest, SupersededWriteIsAStaleRead) {
  uint64_t w1 = Acked(3);
  uint64_t w2 = Acked(3);
  uint64_t floor = verifier_.ReadSent(3);
  EXPECT_NE(ReadOf(3, floor, w1).find("stale value of write"), std::string::npos);
  EXPECT_EQ(ReadOf(3, floor, w2), "");
  // Other keys are not affected.
  uint64_t w3 = Acked(4);
  EXPECT_EQ(ReadOf(4, verifier_.ReadSent(4), w3), "");
}

TEST_F(VerifierTest, ConcurrentWritesMayLandInEitherOrder) {
  // w2 is sent before w1 is acknowledged: the server may apply them in
  // either order, so either value may stay.
  uint64_t w1 = verifier_.WriteSent(5);
  uint64_t w2 = Acked(5);
  ASSERT_EQ(verifier_.WriteAnswered(5, w1, Ok()), "");
  uint64_t floor = verifier_.ReadSent(5);
  EXPECT_EQ(ReadOf(5, floor, w1), "");
  EXPECT_EQ(ReadOf(5, floor, w2), "");
}

TEST_F(VerifierTest, ReadSentBeforeTheOverwriteWasAcknowledged) {
  uint64_t w1 = Acked(6);
  uint64_t w2 = verifier_.WriteSent(6);
  uint64_t floor = verifier_.ReadSent(6);  // concurrent with w2
  ASSERT_EQ(verifier_.WriteAnswered(6, w2, Ok()), "");
  EXPECT_EQ(ReadOf(6, floor, w1), "");
  // A read sent now must see w2.
  EXPECT_NE(ReadOf(6, verifier_.ReadSent(6), w1), "");
}

TEST_F(VerifierTest, WrongAnswers) {
  uint64_t w0 = Acked(0);
  uint64_t w1 = Acked(1);
  auto expect = [](const std::string& what, const std::string& part) {
    EXPECT_NE(what.find(part), std::string::npos) << what;
  };
  expect(verifier_.CheckRead(0, 0, Reply{ReplyType::kNull, {}}), "absent");
  expect(verifier_.CheckRead(0, 0, Reply{ReplyType::kError, "ERR x"}), "unexpected reply ERR x");
  expect(verifier_.CheckRead(0, 0, Bulk("short")), "a value of 5 bytes that no write sent");
  // A write number never issued.
  expect(ReadOf(0, 0, 77), "no write sent");
  // Another key's value.
  expect(ReadOf(0, 0, w1), "which went to " + workload_.Key(1));
  // One byte changed.
  std::string flipped = workload_.Value(w0);
  flipped.back() ^= 1;
  expect(verifier_.CheckRead(0, 0, Bulk(flipped)), "wrong bytes");
  // A truncated value.
  std::string cut = workload_.Value(w0);
  cut.pop_back();
  expect(verifier_.CheckRead(0, 0, Bulk(cut)), "wrong bytes");
  // A SET that did not answer +OK.
  uint64_t w2 = verifier_.WriteSent(2);
  expect(verifier_.WriteAnswered(2, w2, Reply{ReplyType::kError, "ERR full"}), "ERR full");
}

}  // namespace
}  // namespace pdpm::pdkvs::loadgen
