// lazyjit._C: the Python face of tracer/lazyjit.h.
#include <Python.h>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <frameobject.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include "debug/notice.h"
#include "tracer/capture.h"
#include "tracer/capture_set.h"
#include "tracer/device_call.h"
#include "tracer/input_names.h"
#include "tracer/lazyjit.h"
#include "tracer/shared_storage.h"
#include "tracer/streams.h"

namespace py = pybind11;

namespace {

// The directories of the torch and lazyjit packages ("/.../torch/"), read once
// under the GIL. Frames are matched by these prefixes, not by "/torch/"
// anywhere in a path: a user's own project may live under a folder named
// lazyjit or torch.
const std::vector<std::string>& library_dirs() {
  static const std::vector<std::string> dirs = [] {
    std::vector<std::string> out;
    py::module_ os_path = py::module_::import("os.path");
    for (const char* name : {"torch", "lazyjit"}) {
      py::object mod = py::module_::import("sys").attr("modules").attr("get")(name);
      if (mod.is_none() || !py::hasattr(mod, "__file__")) continue;
      std::string file = py::str(mod.attr("__file__"));
      out.push_back(py::str(os_path.attr("dirname")(os_path.attr("realpath")(file))).cast<std::string>() + "/");
      out.push_back(py::str(os_path.attr("dirname")(file)).cast<std::string>() + "/");
    }
    return out;
  }();
  return dirs;
}

// A call's arguments as the capture reads them: tensors, ints, floats by
// their bits (as dynamo.py's _arg_key), anything else ignored.
std::vector<lazyjit::CaptureArg> capture_args(const py::list& args) {
  std::vector<lazyjit::CaptureArg> in;
  in.reserve(args.size());
  for (py::handle a : args) {
    if (THPVariable_Check(a.ptr())) in.emplace_back(THPVariable_Unpack(a.ptr()));
    else if (PyLong_Check(a.ptr())) in.emplace_back(static_cast<int64_t>(PyLong_AsLongLong(a.ptr())));
    else if (PyFloat_Check(a.ptr())) {
      double d = PyFloat_AsDouble(a.ptr());
      int64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      in.emplace_back(bits);
    } else in.emplace_back(std::monostate{});
  }
  return in;
}
// (tag, outputs) of the capture that fit, None when none did, or False when
// one did but it writes an argument that shares memory with another (views
// of one buffer): the caller runs the function another way.
py::object hit_to_python(const std::optional<lazyjit::CaptureSet::Hit>& hit) {
  if (!hit) return py::none();
  if (hit->shared_writes) return py::bool_(false);
  py::list l(hit->outputs.size());
  for (size_t i = 0; i < hit->outputs.size(); ++i)
    l[i] = py::reinterpret_steal<py::object>(THPVariable_Wrap(hit->outputs[i]));
  return py::make_tuple(hit->tag, l);
}

// Whether a code object's file (its co_filename) lies in torch or lazyjit, or
// is frozen. Known per filename object, held here so that its address names
// it: a sync's call site walks the same few files' frames every time (in
// generate, a dozen of torch's and transformers' each step). Under the GIL.
bool internal_file(PyObject* filename) {
  static std::unordered_map<PyObject*, bool> known;
  auto it = known.find(filename);
  if (it != known.end()) return it->second;
  const std::string file = py::str(filename);
  bool internal = file.rfind("<frozen", 0) == 0;
  for (const std::string& dir : library_dirs()) internal = internal || file.rfind(dir, 0) == 0;
  Py_INCREF(filename);
  known.emplace(filename, internal);
  return internal;
}

// file:line of the innermost Python frame outside torch and lazyjit.
// Taking the GIL while Python finalizes ends the calling thread (pthread_exit):
// a C++ thread (autograd's device thread, say) unwound that way through
// noexcept code calls std::terminate. Such a thread asks nothing of Python then.
bool python_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

std::string python_call_site() {
  if (!Py_IsInitialized() || python_finalizing()) return {};
  // A thread that never ran Python (autograd's device thread) has no frame to
  // find; taking the GIL there, under the trace's lock, could only deadlock.
  if (!PyGILState_Check() && !PyGILState_GetThisThreadState()) return {};
  py::gil_scoped_acquire gil;
  PyFrameObject* f = PyEval_GetFrame();
  if (f) Py_INCREF(f);
  std::string site;
  while (f) {
    PyCodeObject* code = PyFrame_GetCode(f);
    const bool internal = internal_file(code->co_filename);
    if (!internal) {
      // The line only of the frame named: finding it walks the code's line table.
      site = py::str(code->co_filename).cast<std::string>() + ":" + std::to_string(PyFrame_GetLineNumber(f));
      Py_DECREF(code);
      Py_DECREF(f);
      break;
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  return site;
}

// The tensors the calling frames hold, named as the code names them
// (lazyjit/_names.py), for recompile explanations (tracer/input_names.h).
std::vector<std::pair<std::string, at::Tensor>> python_named_tensors() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (!Py_IsInitialized() || python_finalizing()) return out;
  if (!PyGILState_Check() && !PyGILState_GetThisThreadState()) return out;
  py::gil_scoped_acquire gil;
  try {
    py::object named = py::module_::import("lazyjit._names").attr("named_tensors")();
    for (py::handle item : named) {
      py::tuple pair = py::reinterpret_borrow<py::tuple>(item);
      if (pair.size() == 2 && THPVariable_Check(pair[1].ptr()))
        out.emplace_back(pair[0].cast<std::string>(), THPVariable_Unpack(pair[1].ptr()));
    }
  } catch (const std::exception&) {  // names are a courtesy: the explanation goes on without them
    PyErr_Clear();
  }
  return out;
}

py::dict to_dict(const lazyjit::debug::MetricsSnapshot& s) {
  py::dict d;
  for (const auto& [k, v] : s.counters) d[py::str(k)] = v;
  d["fallbacks"] = s.fallbacks;
  d["fallback_sites"] = s.fallback_sites;
  d["sync_reasons"] = s.syncs;
  d["syncs_by_how"] = s.syncs_by_how;
  d["compile_reasons"] = s.cache_misses;
  d["disk_errors_by_kind"] = s.disk_errors;
  d["remote_errors_by_kind"] = s.remote_errors;
  py::dict t;
  for (const auto& [k, v] : s.timings) {
    py::dict e;
    e["count"] = v.count;
    e["total_ms"] = v.total_ms;
    e["max_ms"] = v.max_ms;
    t[py::str(k)] = e;
  }
  d["timings"] = t;
  // Time spent building programs on a miss (graph passes, planning, codegen).
  auto compile = s.timings.find("compile");
  d["compile_ms"] = compile == s.timings.end() ? 0.0 : compile->second.total_ms;
  // Time spent loading programs from the on-disk cache (linking, no codegen).
  auto load = s.timings.find("disk_load");
  d["load_ms"] = load == s.timings.end() ? 0.0 : load->second.total_ms;
  // Time spent talking to the remote tier (LAZYJIT_REMOTE_CACHE): lookups and writes.
  auto remote = s.timings.find("remote");
  d["remote_ms"] = remote == s.timings.end() ? 0.0 : remote->second.total_ms;
  return d;
}

py::list to_py(const std::vector<c10::IValue>& vs) {
  py::list l;
  for (const auto& v : vs) l.append(torch::jit::toPyObject(v));
  return l;
}

// Ctrl-C during a long compile (tracer/lazyjit.h): the poll runs Python's
// signal handlers; the KeyboardInterrupt they raise is kept, then thrown as a
// torch python_error, which torch's bindings and ours turn back into it.
PyObject *g_exc_type = nullptr, *g_exc_value = nullptr, *g_exc_tb = nullptr;

bool poll_interrupt() {
  if (python_finalizing()) return false;
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return false;
  Py_XDECREF(g_exc_type);
  Py_XDECREF(g_exc_value);
  Py_XDECREF(g_exc_tb);
  PyErr_Fetch(&g_exc_type, &g_exc_value, &g_exc_tb);
  return true;
}

void raise_interrupt() {
  python_error e;
  {
    py::gil_scoped_acquire gil;
    if (!g_exc_type) PyErr_SetNone(PyExc_KeyboardInterrupt);
    else PyErr_Restore(g_exc_type, g_exc_value, g_exc_tb);
    g_exc_type = g_exc_value = g_exc_tb = nullptr;
    e.persist();
  }
  throw e;
}

// c10's own warning handler (a "[W ...]" line on stderr), as found at import,
// where no torch binding has put its own in place.
c10::WarningHandler* g_base_warning_handler = nullptr;

// lazyjit's notices (debug/notice.h): under a torch binding (torch.multinomial,
// .item(), lazyjit.sync()) a UserWarning raised when the call returns, as
// PyTorch's own CPU fallbacks warn; elsewhere (autograd's device thread, a
// thread of C++'s) a line on stderr.
void python_notice(const std::string& line) {
  if (c10::WarningUtils::get_warning_handler() != g_base_warning_handler) {
    // No C++ source location: Python puts the warning at the caller's line.
    c10::warn(c10::Warning(c10::UserWarning(), c10::SourceLocation{__func__, nullptr, 0}, line, /*verbatim=*/true));
    return;
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  g_base_warning_handler = c10::WarningUtils::get_warning_handler();
  lazyjit::debug::set_notice_sink(python_notice);
  lazyjit::init();
  lazyjit::set_call_site_provider(python_call_site);
  lazyjit::tracer::set_input_name_provider(python_named_tensors);
  lazyjit::set_interrupt_handlers(poll_interrupt, raise_interrupt);
  // ATen's errors become Python exceptions as torch's own bindings make them
  // (c10::IndexError -> IndexError, ...): a sync raises eager's error type.
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      std::rethrow_exception(p);
    } catch (python_error& e) {  // e.g. a KeyboardInterrupt that stopped a compile
      e.restore();

    } catch (const c10::Error&) {
      torch::translate_exception_to_python(p);
    }
  });
  m.def("sync", [] {
    torch::PyWarningHandler warnings;  // notices of the sync, as UserWarnings when it returns
    try {
      py::gil_scoped_release nogil;
      lazyjit::sync();
    } catch (...) {
      warnings.set_in_exception();
      throw;
    }
  });
  m.def("set_mode", [](const std::string& mode) {
    py::gil_scoped_release nogil;
    lazyjit::set_mode(mode);
  });
  m.def("mode", [] { return lazyjit::mode() == lazyjit::Mode::Step ? "step" : "lazy"; });
  m.def("target", &lazyjit::target);
  // What Python asks of the target instead of testing its name (device_module.py, dynamo.py, _pickle.py).
  m.def("data_device_type", &lazyjit::data_device_type);
  m.def("data_on_host", &lazyjit::data_on_host);
  m.def("data_generator", [] { return py::reinterpret_steal<py::object>(THPGenerator_Wrap(lazyjit::data_generator())); });
  py::class_<lazyjit::HookHandle>(m, "HookHandle").def("remove", &lazyjit::HookHandle::remove);
  m.def("add_op_hook", [](py::function fn, bool lazy, bool with_info) {
    auto holder = std::make_shared<py::function>(std::move(fn));
    return lazyjit::add_op_hook([holder, with_info](const lazyjit::OpEvent& e) {
      py::gil_scoped_acquire gil;
      if (!with_info) {
        (*holder)(e.op, to_py(e.inputs), to_py(e.outputs));
        return;
      }
      py::dict info;
      info["lazy"] = e.lazy;
      info["index"] = e.index;
      info["site"] = e.site;
      info["duration_ms"] = e.duration_ms;
      info["kernel"] = e.kernel;
      info["kernel_ms"] = e.kernel_ms;
      (*holder)(e.op, to_py(e.inputs), to_py(e.outputs), info);
    }, lazy);
  }, py::arg("fn"), py::arg("lazy") = false, py::arg("with_info") = false);
  m.def("check_graphs", [](bool on, const std::string& repro_dir) {
    py::gil_scoped_release nogil;
    lazyjit::check_graphs(on, repro_dir);
  });
  m.def("run_repro", [](const std::string& dir) {
    py::gil_scoped_release nogil;
    return lazyjit::run_repro(dir);
  });
  m.def("metrics", [] { return to_dict(lazyjit::metrics()); });
  m.def("reset_metrics", &lazyjit::reset_metrics);
  m.def("metrics_report", [](bool all) { return lazyjit::debug::Metrics::get().report(all); },
        py::arg("all") = false);
  m.def("last_sync", [] { return std::string(lazyjit::debug::Metrics::last_sync_how()); });
  // Why each program was compiled: what differed from the nearest program
  // compiled before at the same sync call site (LAZYJIT_LOG=recompiles prints them).
  m.def("explain_recompiles", [] {
    py::list out;
    for (const auto& r : lazyjit::metrics().recompiles) {
      py::dict d;
      d["site"] = r.site;
      d["kind"] = r.kind;
      d["detail"] = r.detail;
      out.append(d);
    }
    return out;
  });
  m.def("clear_cache", &lazyjit::clear_cache);
  m.def("stop_background_compiles", [] {
    py::gil_scoped_release nogil;
    lazyjit::stop_background_compiles();
  });
  m.def("wait_for_compiles", [] {
    py::gil_scoped_release nogil;
    return lazyjit::wait_for_compiles();
  });
  m.def("step_region_enter", &lazyjit::step_region_enter);
  m.def("step_region_exit", &lazyjit::step_region_exit);
  m.def("strict_enter", &lazyjit::strict_enter);
  m.def("strict_exit", &lazyjit::strict_exit);
  m.def("debug_nans", [](bool on) { lazyjit::debug_nans(on); });
  m.def("mark_dynamic", [](const at::Tensor& t, int64_t dim) { lazyjit::mark_dynamic(t, dim); });
  m.def("start_trace", [](const std::string& path) { lazyjit::start_trace(path); });
  m.def("stop_trace", [] {
    py::gil_scoped_release nogil;
    lazyjit::stop_trace();
  });
  // Lazyjit storages in shared memory (tracer/shared_storage.h; _pickle.py
  // moves them there and sends them). Tensors stand for storages: `t` a
  // lazyjit tensor over the storage, `shm` a uint8 CPU tensor over the block.
  m.def("share_storage", [](const at::Tensor& t, const at::Tensor& shm, bool keep) {
    py::gil_scoped_release nogil;
    lazyjit::tracer::share_storage(t, shm, keep);
  });
  m.def("shared_memory", [](const at::Tensor& t) -> py::object {
    at::Tensor shm = lazyjit::tracer::shared_memory(t);
    if (!shm.defined()) return py::none();
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(shm));
  });
  m.def("sync_shared_storages", [] {
    py::gil_scoped_release nogil;
    lazyjit::tracer::sync_shared_storages();
  });
  // torch.lazyjit's functions that take a device (device_module.py): an index
  // other than the device's raises as set_device does.
  m.def("check_device_index", [](int64_t i) { lazyjit::tracer::check_device_index(i); });
  m.def("mark_static", [](const at::Tensor& t, int64_t dim) { lazyjit::mark_static(t, dim); });

  // torch.compile(backend="lazyjit") (python/lazyjit/dynamo.py, tracer/capture.h).
  struct PyCapture {
    std::unique_ptr<lazyjit::Capture> c = std::make_unique<lazyjit::Capture>();
    lazyjit::Capture& get() {
      if (!c) throw std::logic_error("lazyjit: the capture is closed");
      return *c;
    }
  };
  // run: a call's arguments, the tag and outputs of the capture that fits them.
  py::class_<lazyjit::CaptureSet>(m, "CaptureSet")
      .def(py::init<size_t>())
      .def("run",
           [](lazyjit::CaptureSet& set, const py::list& args) -> py::object {
             std::vector<lazyjit::CaptureArg> in = capture_args(args);
             std::optional<lazyjit::CaptureSet::Hit> hit;
             {
               py::gil_scoped_release nogil;
               hit = set.run(in);
             }
             return hit_to_python(hit);
           })
      // The same on lazyjit tensors (tracer/device_call.h): the arguments'
      // data are bound (after what the thread recorded has run), and the
      // outputs come back as lazyjit tensors.
      .def("run_on_device",
           [](lazyjit::CaptureSet& set, const py::list& args) -> py::object {
             std::vector<lazyjit::CaptureArg> in = capture_args(args);
             std::vector<at::Tensor> lazy;
             std::vector<size_t> at_;
             for (size_t i = 0; i < in.size(); ++i)
               if (auto* t = std::get_if<at::Tensor>(&in[i])) {
                 lazy.push_back(*t);
                 at_.push_back(i);
               }
             std::optional<lazyjit::CaptureSet::Hit> hit;
             {
               py::gil_scoped_release nogil;
               std::vector<at::Tensor> data = lazyjit::data_views(lazy);
               for (size_t k = 0; k < at_.size(); ++k) in[at_[k]] = data[k];
               hit = set.run(in);
               if (hit && !hit->shared_writes)
                 hit->outputs = lazyjit::lazy_results(std::move(hit->outputs), lazy, data);
             }
             return hit_to_python(hit);
           })
      .def("add", &lazyjit::CaptureSet::add)
      .def("__len__", &lazyjit::CaptureSet::size);
  // A call on lazyjit tensors (tracer/device_call.h): the arguments' data, in
  // place of each lazyjit tensor (other items as they are), after what the
  // thread recorded has run; then the program's results as lazyjit tensors.
  m.def("data_views", [](const py::list& args) {
    std::vector<at::Tensor> ts;
    std::vector<size_t> at_;
    for (size_t i = 0; i < args.size(); ++i)
      if (THPVariable_Check(args[i].ptr())) {
        ts.push_back(THPVariable_Unpack(args[i].ptr()));
        at_.push_back(i);
      }
    std::vector<at::Tensor> data;
    {
      py::gil_scoped_release nogil;
      data = lazyjit::data_views(ts);
    }
    py::list out(args.size());
    for (size_t i = 0; i < args.size(); ++i) out[i] = args[i];
    for (size_t k = 0; k < at_.size(); ++k)
      out[at_[k]] = py::reinterpret_steal<py::object>(THPVariable_Wrap(data[k]));
    return out;
  });
  m.def("lazy_results", [](const py::list& outs, const py::list& args, const py::list& data) {
    std::vector<at::Tensor> a, d;
    for (size_t i = 0; i < args.size() && i < data.size(); ++i)
      if (THPVariable_Check(args[i].ptr()) && THPVariable_Check(data[i].ptr())) {
        a.push_back(THPVariable_Unpack(args[i].ptr()));
        d.push_back(THPVariable_Unpack(data[i].ptr()));
      }
    std::vector<at::Tensor> ts;
    for (size_t i = 0; i < outs.size(); ++i)
      if (THPVariable_Check(outs[i].ptr())) ts.push_back(THPVariable_Unpack(outs[i].ptr()));
    ts = lazyjit::lazy_results(std::move(ts), a, d);
    py::list out(outs.size());
    for (size_t i = 0, k = 0; i < outs.size(); ++i)
      out[i] = THPVariable_Check(outs[i].ptr()) ? py::reinterpret_steal<py::object>(THPVariable_Wrap(ts[k++]))
                                                : py::reinterpret_borrow<py::object>(outs[i]);
    return out;
  });
  // Made by Capture.finish, handed to CaptureSet.add.
  py::class_<lazyjit::CapturedGraph, std::shared_ptr<lazyjit::CapturedGraph>>(m, "CapturedGraph")
      .def_property_readonly("ops", &lazyjit::CapturedGraph::ops);
  py::class_<PyCapture>(m, "Capture")
      .def(py::init<>())
      .def("placeholder", [](PyCapture& c, const at::Tensor& t) { return c.get().placeholder(t); })
      .def("other_arg", [](PyCapture& c, std::optional<int64_t> v) { c.get().other_arg(v); })
      .def("finish",
           [](PyCapture& c, const std::vector<at::Tensor>& outs, const std::string& site, bool dynamic) {
             py::gil_scoped_release nogil;
             return c.get().finish(outs, site, dynamic);
           })
      .def("close", [](PyCapture& c) { c.c.reset(); });
}
