#include "tools/lazyjit_cache/ir_graph.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

namespace lazyjit::cache_tool {

namespace {

std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// "aten["aten::addmm", $0, ...]" -> "aten::addmm"; "gelu[f32]" -> "gelu".
std::string short_op(const std::string& op_and_attrs) {
  size_t b = op_and_attrs.find('[');
  std::string op = op_and_attrs.substr(0, b);
  if (op == "aten" && b != std::string::npos) {
    size_t q1 = op_and_attrs.find('"', b), q2 = q1 == std::string::npos ? q1 : op_and_attrs.find('"', q1 + 1);
    if (q2 != std::string::npos) return op_and_attrs.substr(q1 + 1, q2 - q1 - 1);
  }
  return op;
}

}  // namespace

std::string ir_to_dot(const std::string& ir_text) {
  std::ostringstream dot;
  dot << "digraph G {\n  rankdir=TB; node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  std::istringstream in(ir_text);
  std::string line;
  static const std::regex value("%([0-9]+)");
  while (std::getline(in, line)) {
    size_t eq = line.find(" = ");
    if (eq == std::string::npos) {
      if (size_t r = line.find("return"); r != std::string::npos)
        for (std::sregex_iterator it(line.begin(), line.end(), value), end; it != end; ++it)
          dot << "  v" << (*it)[1] << " [penwidth=2.5];\n";
      continue;
    }
    std::string lhs = line.substr(0, eq), rhs = line.substr(eq + 3);
    size_t colon = rhs.rfind(" : ");
    std::string type = colon == std::string::npos ? "" : rhs.substr(colon + 3);
    // The operand list is the last "(...)" before the type.
    size_t close = rhs.rfind(')', colon), open = close == std::string::npos ? close : rhs.rfind('(', close);
    std::string head = open == std::string::npos ? rhs : rhs.substr(0, open);
    std::string operands = open == std::string::npos ? "" : rhs.substr(open, close - open + 1);
    std::smatch first;
    if (!std::regex_search(lhs, first, value)) continue;
    std::string id = first[1], op = short_op(head);
    std::string style = op == "input" || op == "scalar" ? ", style=filled, fillcolor=\"#e8eef7\"" : "";
    if (op == "input" || op == "scalar") op = head;  // keep the index: "input[1]"
    dot << "  v" << id << " [label=\"%" << id << " " << dot_escape(op) << "\\n" << dot_escape(type) << "\"" << style
        << "];\n";
    for (std::sregex_iterator it(operands.begin(), operands.end(), value), end; it != end; ++it)
      dot << "  v" << (*it)[1] << " -> v" << id << ";\n";
  }
  dot << "}\n";
  return dot.str();
}

std::string dot_to_svg(const std::string& dot_source, std::string* note) {
  char path[] = "/tmp/lazyjit-cache-dot.XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0 || ::write(fd, dot_source.data(), dot_source.size()) != (ssize_t)dot_source.size()) {
    if (fd >= 0) ::close(fd), ::unlink(path);
    *note = "cannot write a temporary file for dot";
    return "";
  }
  ::close(fd);
  std::string svg;
  if (FILE* p = ::popen(("dot -Tsvg '" + std::string(path) + "' 2>/dev/null").c_str(), "r")) {
    char buf[8192];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) svg.append(buf, n);
    if (::pclose(p) != 0) svg.clear();
  }
  ::unlink(path);
  size_t at = svg.find("<svg");
  if (at == std::string::npos) {
    *note = "Graphviz (dot) not installed or failed: showing the IR text";
    return "";
  }
  return svg.substr(at);  // without the XML prolog and DOCTYPE, so it can sit inside HTML
}

}  // namespace lazyjit::cache_tool
