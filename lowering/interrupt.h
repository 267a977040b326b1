// Ctrl-C during a long compile. Whoever embeds lazyjit installs a poll that
// says whether the user asked to stop (the Python module's checks for a
// pending KeyboardInterrupt). Lowering polls between kernels and between LLVM
// passes (at most every few milliseconds): once the poll says stop, the
// remaining optimization passes are skipped and lowering throws Interrupted at
// its next check, leaving no half-built program anywhere. The tracer keeps the
// graph it was syncing, so the pending tensors are still pending afterwards.
#pragma once
#include <stdexcept>

namespace lazyjit::lowering {

struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("lazyjit: compile interrupted (Ctrl-C); the pending tensors are still pending") {}
};

// `poll` must not throw; it is called from LLVM's pass manager. `raise`, when
// set, is what throw_if_interrupted() calls to throw (the Python module throws
// the KeyboardInterrupt itself); it must throw. Both may be null.
using InterruptPoll = bool (*)();
using InterruptRaise = void (*)();
void set_interrupt_handlers(InterruptPoll poll, InterruptRaise raise);

// True once the poll has said stop, until clear_interrupt(). Cheap: the poll
// itself runs at most every 10 ms.
bool interrupt_requested();
// Whether the poll has said stop (without polling): how a caller tells an
// interrupted compile from a failed one.
bool interrupt_seen();
// Throws (Interrupted, or through the installed `raise`) if interrupt_requested().
void throw_if_interrupted();
// On this thread, while it lives: interrupt_requested() only reads the flag
// (never polls) and throw_if_interrupted() throws Interrupted without `raise`.
// For worker threads of a compile: the poll may need what only the thread that
// started the compile holds (Python's interpreter lock).
struct NoPollScope {
  NoPollScope();
  ~NoPollScope();
  NoPollScope(const NoPollScope&) = delete;
  NoPollScope& operator=(const NoPollScope&) = delete;
};

// After the interrupt has been handled (the tracer calls this once the
// exception leaves the sync).
void clear_interrupt();

}  // namespace lazyjit::lowering
