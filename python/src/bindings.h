// The pieces of the gradcomp._C extension module, one file each.
#pragma once

#include <nanobind/nanobind.h>

namespace gradcomp::python {

namespace nb = nanobind;

void bindErrors(nanobind::module_& m);
void bindCodec(nanobind::module_& m);
void bindErrorFeedback(nanobind::module_& m);
void bindParts(nanobind::module_& m);
void bindLowRank(nanobind::module_& m);
void bindCostModel(nanobind::module_& m);
void bindCpuPath(nanobind::module_& m);

}  // namespace gradcomp::python
