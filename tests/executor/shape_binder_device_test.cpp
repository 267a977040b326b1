// A bind to new sizes runs the graph passes again on the new graph and binds
// only when they give the program's structure, so it must run them with the
// rules of the device the program's ATen steps run on (gemm_epilogue fuses
// relu into the GEMM under the CUDA target, not on the CPU): with the other
// device's rules nothing would ever bind, and every new size would compile.
#include <gtest/gtest.h>

#include "lowering/lower.h"
#include "runtime/shape_binder.h"
#include "test_graphs.h"
#include "targets/cpu/cpu_target.h"

using namespace lazyjit;
using namespace test_graphs;

namespace {

// relu(x[rows, 4] @ w[4, 16] + b[16])
ir::Graph linear_relu(int64_t rows) {
  ir::Graph g;
  ValueId x = g.add_input(f32({rows, 4})), w = g.add_input(f32({4, 16})), b = g.add_input(f32({16}));
  ValueId m = g.add_node1(OpKind::Aten, {x, w},
                          {Attr{std::string("aten::mm")}, Attr{ir::OperandRef{0}}, Attr{ir::OperandRef{1}}},
                          f32({rows, 16}));
  ValueId y = g.add_node1(OpKind::Add, {m, b}, {dt(DType::Float32)}, f32({rows, 16}));
  g.add_output(g.add_node1(OpKind::Relu, {y}, {dt(DType::Float32)}, f32({rows, 16})));
  return g;
}

std::shared_ptr<const lowering::Program> lowered_for(const lowering::PassRules& rules) {
  static std::unique_ptr<lowering::Target> cpu = lowering::make_cpu_target();
  lowering::LowerOptions o;
  o.pass_rules = rules;
  o.shapes = lowering::Shapes::All;
  return lowering::lower(linear_relu(8), *cpu, o);
}

}  // namespace

TEST(ShapeBinder, BindsWithTheRulesOfTheDeviceItsProgramWasLoweredFor) {
  const lowering::PassRules cpu = lowering::cpu_library_rules(), cuda = lowering::cuda_library_rules();
  for (bool on_cuda : {false, true}) {
    SCOPED_TRACE(on_cuda ? "cuda rules" : "cpu rules");
    auto program = lowered_for(on_cuda ? cuda : cpu);
    EXPECT_EQ(program->graph.str().find("_addmm_activation") != std::string::npos, on_cuda) << program->graph.str();
    runtime::ShapeBinder same, other;
    same.set_pass_rules(on_cuda ? cuda : cpu);
    other.set_pass_rules(on_cuda ? cpu : cuda);
    same.remember(linear_relu(8), 0, program, {});
    other.remember(linear_relu(8), 0, program, {});
    auto bound = same.bind(linear_relu(12), 0, {});
    ASSERT_NE(bound, nullptr);
    EXPECT_EQ(bound->graph.value(bound->graph.outputs()[0]).type.sizes, (std::vector<int64_t>{12, 16}));
    EXPECT_EQ(other.bind(linear_relu(12), 0, {}), nullptr);
  }
}
