// gradcomp's typed C++ errors become Python exceptions of matching types carrying the C++ message:
//   Error (RuntimeError)            the base of all of them
//   InvalidArgument, DecodeError    also ValueError: a bad spec, size or payload
//   TimeoutError                    also the builtin TimeoutError
//   NonFiniteError                  also ArithmeticError, with .tensor_id and .index
//   BackendUnavailable, PeerFailure, CollectiveMismatch, TransportError, ConcurrentUse, TrainingDiverged
// The classes are made here, not in Python, so an error raised while the package is half imported is
// still the right type; the Python layer raises the same classes for the checks it does itself.
#include <nanobind/nanobind.h>

#include "bindings.h"
#include "core/error.h"

namespace gradcomp::python {

namespace nb = nanobind;

namespace {

struct ErrorTypes {
  PyObject* base = nullptr;
  PyObject* invalidArgument = nullptr;
  PyObject* decode = nullptr;
  PyObject* backendUnavailable = nullptr;
  PyObject* timeout = nullptr;
  PyObject* peerFailure = nullptr;
  PyObject* collectiveMismatch = nullptr;
  PyObject* transport = nullptr;
  PyObject* concurrentUse = nullptr;
  PyObject* trainingDiverged = nullptr;
  PyObject* nonFinite = nullptr;
};
ErrorTypes types;  // owned by the module (added as attributes), alive as long as it is

PyObject* makeType(nb::module_& m, const char* name, const char* doc, std::initializer_list<PyObject*> bases) {
  nb::tuple baseTuple = nb::steal<nb::tuple>(PyTuple_New(static_cast<Py_ssize_t>(bases.size())));
  Py_ssize_t i = 0;
  for (PyObject* b : bases) {
    Py_INCREF(b);
    PyTuple_SET_ITEM(baseTuple.ptr(), i++, b);
  }
  const std::string qualified = std::string("gradcomp.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, baseTuple.ptr(), nullptr);
  if (!type) throw nb::python_error();
  m.attr(name) = nb::handle(type);  // the module holds the reference
  Py_DECREF(type);
  return type;
}

void raise(PyObject* type, const std::exception& e) { PyErr_SetString(type, e.what()); }

void raiseNonFinite(const NonFiniteError& e) {
  nb::object instance = nb::steal(PyObject_CallFunction(types.nonFinite, "s", e.what()));
  if (!instance.is_valid()) return;  // the call set its own error
  instance.attr("tensor_id") = e.tensorId();
  instance.attr("index") = e.index();
  PyErr_SetObject(types.nonFinite, instance.ptr());
}

}  // namespace

void bindErrors(nb::module_& m) {
  types.base = makeType(m, "Error", "Base of every gradcomp error.", {PyExc_RuntimeError});
  types.invalidArgument = makeType(m, "InvalidArgument", "A configuration value or argument is invalid.",
                                   {types.base, PyExc_ValueError});
  types.decode = makeType(m, "DecodeError", "A wire buffer failed validation; nothing was written.",
                          {types.base, PyExc_ValueError});
  types.backendUnavailable =
      makeType(m, "BackendUnavailable", "CUDA, MPI or NCCL is not compiled in or not usable.", {types.base});
  types.timeout = makeType(m, "TimeoutError", "A collective wait passed its deadline.",
                           {types.base, PyExc_TimeoutError});
  types.peerFailure = makeType(m, "PeerFailure", "A peer rank failed.", {types.base});
  types.collectiveMismatch = makeType(
      m, "CollectiveMismatch", "Ranks disagree about a collective; raised on every rank.", {types.base});
  types.transport = makeType(m, "TransportError", "The transport itself failed.", {types.base});
  types.concurrentUse = makeType(m, "ConcurrentUse", "A communicator was used by two threads at once.", {types.base});
  types.trainingDiverged = makeType(m, "TrainingDiverged", "Training produced a non-finite loss.", {types.base});
  types.nonFinite = makeType(m, "NonFiniteError",
                             "A gradient holds NaN or Inf; .tensor_id and .index name the first bad element.",
                             {types.base, PyExc_ArithmeticError});

  // Most derived first: the first matching handler wins.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const NonFiniteError& e) {
      raiseNonFinite(e);
    } catch (const InvalidArgument& e) {
      raise(types.invalidArgument, e);
    } catch (const DecodeError& e) {
      raise(types.decode, e);
    } catch (const BackendUnavailable& e) {
      raise(types.backendUnavailable, e);
    } catch (const TimeoutError& e) {
      raise(types.timeout, e);
    } catch (const PeerFailure& e) {
      raise(types.peerFailure, e);
    } catch (const CollectiveMismatch& e) {
      raise(types.collectiveMismatch, e);
    } catch (const TransportError& e) {
      raise(types.transport, e);
    } catch (const ConcurrentUse& e) {
      raise(types.concurrentUse, e);
    } catch (const TrainingDiverged& e) {
      raise(types.trainingDiverged, e);
    } catch (const Error& e) {
      raise(types.base, e);
    }
  });
}

}  // namespace gradcomp::python
