// Tests of the small shared utilities: the structured logger, the flag
// parser and the fair mutex.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/fair_mutex.h"
#include "common/flags.h"
#include "common/log.h"

namespace pdpm {
namespace {

TEST(Logger, FormatsOneLinePerEvent) {
  auto ts = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'700'000'000'123));
  std::string line = Logger::FormatLine(ts, LogLevel::kWarn, "monitor", "server \"2\" is suspect",
                                        {{"server_id", 2},
                                         {"addr", "10.0.0.1:7000"},
                                         {"why", "no heartbeat"},
                                         {"empty", ""},
                                         {"ok", true},
                                         {"st", Status::NotFound("x")}});
  EXPECT_EQ(line,
            "ts=2023-11-14T22:13:20.123Z level=warn component=monitor "
            "msg=\"server \\\"2\\\" is suspect\" server_id=2 addr=10.0.0.1:7000 "
            "why=\"no heartbeat\" empty=\"\" ok=true st=\"not_found: x\"\n");
  std::string nl = Logger::FormatLine(ts, LogLevel::kInfo, "c", "a\nb", {{"k", "x=y"}});
  EXPECT_NE(nl.find("msg=\"a\\nb\" k=\"x=y\"\n"), std::string::npos);
  EXPECT_EQ(nl.find('\n'), nl.size() - 1);
}

TEST(Logger, ConcurrentLinesStayWhole) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  Logger log("test", fds[1], LogLevel::kInfo);
  log.Debug("dropped below the level");
  constexpr int kThreads = 4, kLines = 50;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kLines; ++i) log.Info("event", {{"thread", t}, {"i", i}});
    });
  }
  for (auto& th : threads) th.join();
  close(fds[1]);
  std::string all;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) all.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int lines = 0;
  size_t pos = 0;
  while (pos < all.size()) {
    size_t end = all.find('\n', pos);
    ASSERT_NE(end, std::string::npos);
    std::string line = all.substr(pos, end - pos);
    EXPECT_EQ(line.rfind("ts=", 0), 0u) << line;
    EXPECT_NE(line.find(" level=info component=test msg=\"event\" thread="), std::string::npos);
    ++lines;
    pos = end + 1;
  }
  EXPECT_EQ(lines, kThreads * kLines);
}

TEST(LogLevel, Parse) {
  LogLevel l = LogLevel::kInfo;
  ASSERT_TRUE(ParseLogLevel("debug", &l).ok());
  EXPECT_EQ(l, LogLevel::kDebug);
  EXPECT_EQ(ParseLogLevel("loud", &l).code(), StatusCode::kInvalidArgument);
}

TEST(Flags, ParsesEveryKind) {
  std::string s = "default";
  uint64_t n = 1, size = 0;
  uint32_t n32 = 0;
  std::chrono::milliseconds d{0};
  bool b = false;
  FlagParser p("prog");
  p.AddString("name", &s, "a name");
  p.AddUint64("count", &n, "a count");
  p.AddUint32("small", &n32, "a small count");
  p.AddSize("size", &size, "a size");
  p.AddDuration("timeout", &d, "a duration");
  p.AddBool("embedded", &b, "a switch");
  const char* argv[] = {"prog", "--name=x y", "--count", "42",         "--size",
                        "4MiB", "--timeout",  "3s",      "--embedded", "--small=7"};
  ASSERT_TRUE(p.Parse(10, argv).ok());
  EXPECT_EQ(s, "x y");
  EXPECT_EQ(n, 42u);
  EXPECT_EQ(n32, 7u);
  EXPECT_EQ(size, 4u << 20);
  EXPECT_EQ(d, std::chrono::milliseconds(3000));
  EXPECT_TRUE(b);
  EXPECT_TRUE(p.IsSet("size"));
  EXPECT_NE(p.Usage().find("--timeout VALUE"), std::string::npos);
}

TEST(Flags, HelpIsAskedNotAMistake) {
  uint64_t n = 0;
  FlagParser p("prog");
  p.AddUint64("count", &n, "");
  for (const char* help : {"--help", "-h"}) {
    FlagParser q = p;
    const char* argv[] = {"prog", "--count", "3", help, "--unknown"};
    ASSERT_TRUE(q.Parse(5, argv).ok()) << help;
    testing::internal::CaptureStdout();
    EXPECT_TRUE(q.PrintUsageIfAsked());
    EXPECT_EQ(testing::internal::GetCapturedStdout(), q.Usage());
  }
  const char* argv[] = {"prog", "--count", "3"};
  ASSERT_TRUE(p.Parse(3, argv).ok());
  EXPECT_FALSE(p.PrintUsageIfAsked());
}

TEST(Flags, RejectsMistakes) {
  uint64_t n = 0;
  uint32_t n32 = 0;
  FlagParser p("prog");
  p.AddUint64("count", &n, "");
  p.AddUint32("small", &n32, "");
  auto parse = [&](std::vector<const char*> args) {
    FlagParser q = p;
    args.insert(args.begin(), "prog");
    return q.Parse(static_cast<int>(args.size()), args.data());
  };
  EXPECT_EQ(parse({"--nope", "1"}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse({"--count"}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse({"--count", "12x"}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse({"--count", "-1"}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse({"--small", "5000000000"}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse({"stray"}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse({"--count=1", "--count=2"}).code(), StatusCode::kInvalidArgument);
  Status s = parse({"--count", "abc"});
  EXPECT_NE(s.message().find("--count=abc"), std::string::npos) << s.ToString();
}

TEST(Flags, SizesAndDurations) {
  uint64_t b = 0;
  ASSERT_TRUE(ParseSize("2GiB", &b).ok());
  EXPECT_EQ(b, 2ULL << 30);
  ASSERT_TRUE(ParseSize("64K", &b).ok());
  EXPECT_EQ(b, 64ULL << 10);
  ASSERT_TRUE(ParseSize("512", &b).ok());
  EXPECT_EQ(b, 512u);
  EXPECT_FALSE(ParseSize("3XB", &b).ok());
  EXPECT_FALSE(ParseSize("MiB", &b).ok());
  EXPECT_FALSE(ParseSize("99999999999999TiB", &b).ok());
  std::chrono::milliseconds d{0};
  ASSERT_TRUE(ParseDuration("250ms", &d).ok());
  EXPECT_EQ(d.count(), 250);
  ASSERT_TRUE(ParseDuration("100", &d).ok());
  EXPECT_EQ(d.count(), 100);
  EXPECT_FALSE(ParseDuration("5h", &d).ok());
}

// Whether thread `tid` of this process sleeps (blocked in the kernel).
bool ThreadSleeps(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(stat, line);
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'S';
}

// A holder that releases the lock and asks again at once (a backup fill's
// copy steps) must not pass a thread already waiting: the waiter goes
// first. Both threads share one CPU, as on a loaded machine where the woken
// waiter does not run at once (there std::mutex lets the holder's
// immediate relock win).
TEST(FairMutex, WaiterGoesBeforeAHolderThatAsksAgain) {
  cpu_set_t all, one;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(all), &all), 0);
  CPU_ZERO(&one);
  CPU_SET(::sched_getcpu(), &one);
  ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);  // inherited by the waiter
  FairMutex mu;
  std::atomic<int> order{0};
  std::atomic<pid_t> waiter_tid{0};
  int waiter_turn = 0, holder_turn = 0;
  mu.lock();
  std::thread waiter([&] {
    waiter_tid = static_cast<pid_t>(::syscall(SYS_gettid));
    std::lock_guard lock(mu);
    waiter_turn = ++order;
  });
  while (waiter_tid == 0 || !ThreadSleeps(waiter_tid)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  mu.unlock();
  mu.lock();
  holder_turn = ++order;
  mu.unlock();
  waiter.join();
  ASSERT_EQ(::sched_setaffinity(0, sizeof(all), &all), 0);
  EXPECT_EQ(waiter_turn, 1);
  EXPECT_EQ(holder_turn, 2);
}

TEST(FairMutex, TryLockFailsWhileHeldOrAwaited) {
  FairMutex mu;
  ASSERT_TRUE(mu.try_lock());
  EXPECT_FALSE(mu.try_lock());
  mu.unlock();
  std::unique_lock lock(mu, std::try_to_lock);
  EXPECT_TRUE(lock.owns_lock());
}

}  // namespace
}  // namespace pdpm
