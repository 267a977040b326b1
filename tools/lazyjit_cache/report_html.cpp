#include "tools/lazyjit_cache/commands.h"
#include "tools/lazyjit_cache/cache_index.h"
namespace lazyjit::cache_tool {
int cmd_report(const Common& c, const std::string& html_file) { throw ToolError("todo"); }
}
