// AddressSpaceHolder: lets peers see a killed server's sockets close without
// waiting for the kernel to tear down its PM mapping.
//
// When a process dies (kill -9, a crash) the kernel releases its memory
// before its files: every page of PM the server ever touched is unmapped
// (about 0.1-0.2 ms per MiB of 4 KiB pages, seconds for tens of GiB) and
// only then do its connections reset and its listening port refuse
// connections — the proof of death clients and the monitor wait for
// (docs/replication.md, fast failure detection). The holder is a child
// process that shares the server's address space (clone with CLONE_VM)
// and nothing else: it closes every file descriptor it inherited, blocks
// every signal and sleeps. While it lives, a dying server's threads drop
// their hold on the address space cheaply and close the files at once;
// the kernel kills the holder when the server is gone (its parent-death
// signal) and the unmapping happens then, after the sockets closed.
//
// The holder runs no code of the server: it never writes memory, so
// nothing the dead server did not persist can reach PM through it.
// Create it first in main, before any thread or file exists; destruction
// kills and reaps it.
#pragma once

#include <sys/types.h>

#include <memory>

#include "common/status.h"

namespace pdpm::server {

class AddressSpaceHolder {
 public:
  static Status Start(std::unique_ptr<AddressSpaceHolder>* out);
  ~AddressSpaceHolder();
  AddressSpaceHolder(const AddressSpaceHolder&) = delete;
  AddressSpaceHolder& operator=(const AddressSpaceHolder&) = delete;

  pid_t pid() const { return pid_; }

 private:
  AddressSpaceHolder(pid_t pid, void* stack) : pid_(pid), stack_(stack) {}

  pid_t pid_;
  void* stack_;  // the holder's stack, in the shared address space
};

}  // namespace pdpm::server
