// One line, once, for each thing a user would want to know and would not
// otherwise see: an op that ran on the CPU (per op and call site), a graph cut
// at LAZYJIT_MAX_GRAPH_OPS, a compile that took over a second (per call site),
// where debug dumps go. A warm loop says nothing: each is said the first time
// only. LAZYJIT_LOG=none turns them off; LAZYJIT_LOG=fallbacks says every
// fallback, not only the first at each site (docs/switches.md).
//
// Said through the sink: by default a line on stderr; the Python module sends
// it as a UserWarning when a torch binding called us (as PyTorch says its own
// CPU fallbacks, TORCH_WARN_ONCE), so `warnings.filterwarnings` applies.
// LAZYJIT_LOG=fallbacks is a log: its lines go to stderr, every one.
#pragma once
#include <string>

namespace lazyjit::debug {

enum class NoticeLevel { Off, Once, Every };

void set_notice_level(NoticeLevel level);
NoticeLevel notice_level();

// Says "lazyjit: <text>" the first time `key` is noticed in this process (every
// time under NoticeLevel::Every when `every` is set); returns whether it was said.
bool notice(const std::string& key, const std::string& text, bool every = false);

// Where notices go: the line without its newline ("lazyjit: ..."). Null: stderr.
using NoticeSink = void (*)(const std::string& line);
void set_notice_sink(NoticeSink sink);

// How many notices were said (tests).
long notices_said();

}  // namespace lazyjit::debug
