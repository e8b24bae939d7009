// The gradcomp._C extension: codecs and error feedback over DLPack arrays. It includes no torch header
// and links no libtorch, so one build serves every torch version (and numpy-only users).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.h"

NB_MODULE(_C, m) {
  // Codecs held by a DDP hook state or its worker thread may still be alive when the interpreter exits;
  // that is not a leak worth a report on every run.
  nanobind::set_leak_warnings(false);
  m.doc() = "gradcomp's C++ codecs and error feedback (see the gradcomp package for the Python API)";
  gradcomp::python::bindErrors(m);
  gradcomp::python::bindCodec(m);
  gradcomp::python::bindErrorFeedback(m);
  gradcomp::python::bindParts(m);
  gradcomp::python::bindLowRank(m);
  gradcomp::python::bindCostModel(m);
  gradcomp::python::bindCpuPath(m);
  nanobind::dict build;
#ifdef GRADCOMP_HAVE_CUDA
  build["cuda"] = true;
#else
  build["cuda"] = false;
#endif
#ifdef GRADCOMP_HAVE_MPI
  build["mpi"] = true;
#else
  build["mpi"] = false;
#endif
#ifdef GRADCOMP_HAVE_NCCL
  build["nccl"] = true;
#else
  build["nccl"] = false;
#endif
  m.attr("build_info") = build;
}
