// gradcomp._C.cpu_path / supported_cpu_path / set_cpu_path: which vector path the CPU kernels take
// (kernels/cpu/cpu_path.h), so a benchmark or a bug report from Python names it, and a test can pin a
// path against another.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "bindings.h"
#include "kernels/cpu/cpu_path.h"

namespace gradcomp::python {

void bindCpuPath(nb::module_& m) {
  m.def("cpu_path", [] { return std::string(cpu::cpuPathName(cpu::activeCpuPath())); },
        "The CPU kernels' vector path now: 'avx512', 'avx2' or 'scalar'.");
  m.def("supported_cpu_path", [] { return std::string(cpu::cpuPathName(cpu::supportedCpuPath())); },
        "The best path this CPU runs and this build contains.");
  m.def("set_cpu_path", [](const std::string& name) { cpu::setCpuPath(cpu::parseCpuPath(name.c_str())); },
        nb::arg("name"),
        "Takes the named path from now on (for comparisons and tests); InvalidArgument above the supported one.");
}

}  // namespace gradcomp::python
