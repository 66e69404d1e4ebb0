#include <tessel/core/H5File.hpp>

#include <hdf5.h>

#include <tessel/core/InputFile.hpp>
#include <tessel/core/Memory.hpp>

#include <algorithm>
#include <limits>
#include <sstream>

namespace tessel::h5 {

namespace {

// Closes an HDF5 identifier with the matching H5?close on scope exit.
class Handle {
public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : _id(id), _close(close) {}
  ~Handle() {
    if (_id >= 0)
      _close(_id);
  }
  Handle(Handle const &) = delete;
  Handle &operator=(Handle const &) = delete;
  hid_t get() const { return _id; }
  bool valid() const { return _id >= 0; }

private:
  hid_t _id;
  herr_t (*_close)(hid_t);
};

// The innermost message of HDF5's error stack: the most specific reason ("truncated file: eof = ...").
herr_t collect_error(unsigned n, H5E_error2_t const *err, void *data) {
  auto *out = static_cast<std::string *>(data);
  if (n == 0 && err->desc)
    *out = err->desc;
  return 0;
}

std::string hdf5_reason() {
  std::string reason;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &reason);
  H5Eclear2(H5E_DEFAULT);
  return reason.empty() ? std::string() : " (HDF5: " + reason + ")";
}

// Before the first HDF5 call of the process (every call here goes through a File, whose constructor calls this).
void prepare_hdf5() {
  static bool const done = [] {
    // HDF5 (1.10) frees a file whose H5Fclose fails in its final flush (a full disk) but keeps its identifier; the
    // exit handler HDF5 registers on its first call closes every identifier left, that one again, and crashes
    // (SIGSEGV in H5F__close_cb) after the tool has reported the error. Tessel closes its files itself (close(),
    // ~File), so the library is not terminated at exit; H5dont_atexit works only before HDF5 is initialized.
    H5dont_atexit();
    // Tessel reports HDF5 failures as exceptions; the library's own stderr dump would only duplicate them.
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

hid_t native_type(DataType type) {
  switch (type) {
  case DataType::int8:
    return H5T_NATIVE_INT8;
  case DataType::uint8:
    return H5T_NATIVE_UINT8;
  case DataType::int32:
    return H5T_NATIVE_INT32;
  case DataType::uint32:
    return H5T_NATIVE_UINT32;
  case DataType::int64:
    return H5T_NATIVE_INT64;
  case DataType::uint64:
    return H5T_NATIVE_UINT64;
  case DataType::float32:
    return H5T_NATIVE_FLOAT;
  case DataType::float64:
    return H5T_NATIVE_DOUBLE;
  case DataType::float16:
  case DataType::bfloat16:
    break;
  }
  TESSEL_THROW("HDF5 I/O of ", name_of(type), " is not supported");
}

struct TypeInfo {
  H5T_class_t cls;
  std::size_t size;
  bool is_signed;
};

std::string describe(TypeInfo const &t) {
  if (t.cls == H5T_INTEGER)
    return (t.is_signed ? "int" : "uint") + std::to_string(8 * t.size);
  if (t.cls == H5T_FLOAT)
    return "float" + std::to_string(8 * t.size);
  if (t.cls == H5T_STRING)
    return "string";
  if (t.cls == H5T_COMPOUND)
    return "compound";
  return "non-numeric type (class " + std::to_string(static_cast<int>(t.cls)) + ")";
}

TypeInfo info_of(hid_t type) {
  TypeInfo t{H5Tget_class(type), H5Tget_size(type), false};
  if (t.cls == H5T_INTEGER)
    t.is_signed = H5Tget_sign(type) == H5T_SGN_2;
  return t;
}

TypeInfo info_of(DataType type) {
  switch (type) {
  case DataType::int8:
  case DataType::int32:
  case DataType::int64:
    return {H5T_INTEGER, size_of(type), true};
  case DataType::uint8:
  case DataType::uint32:
  case DataType::uint64:
    return {H5T_INTEGER, size_of(type), false};
  default:
    return {H5T_FLOAT, size_of(type), true};
  }
}

// Reading `found` as `wanted` keeps every value exactly.
bool lossless(TypeInfo const &found, TypeInfo const &wanted) {
  if (found.cls != wanted.cls)
    return false;
  if (found.cls == H5T_FLOAT)
    return found.size <= wanted.size;
  if (found.is_signed == wanted.is_signed)
    return found.size <= wanted.size;
  return !found.is_signed && wanted.is_signed && found.size < wanted.size;
}

DataType to_data_type(TypeInfo const &t) {
  if (t.cls == H5T_FLOAT)
    return t.size == 4 ? DataType::float32 : DataType::float64;
  switch (t.size) {
  case 1:
    return t.is_signed ? DataType::int8 : DataType::uint8;
  case 4:
    return t.is_signed ? DataType::int32 : DataType::uint32;
  default:
    return t.is_signed ? DataType::int64 : DataType::uint64;
  }
}

std::string normalize(std::string const &name) { return name.empty() || name[0] != '/' ? "/" + name : name; }

} // namespace

std::string to_string(std::vector<std::size_t> const &shape) {
  std::ostringstream os;
  os << "(";
  for (std::size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << (shape[i] == any ? std::string("*") : std::to_string(shape[i]));
  os << (shape.size() == 1 ? ",)" : ")");
  return os.str();
}

File::File(std::string path, Mode mode) : _path(std::move(path)), _writable(mode != Mode::read) {
  prepare_hdf5();
  bool const exists = input_exists(_path);
  if (mode == Mode::read || (mode == Mode::append && exists)) {
    TESSEL_REQUIRE(exists, _path, ": file not found");
    // A regular file (HDF5 would block on a named pipe); its size does not matter, datasets are read as needed. An
    // empty one holds no signature, and HDF5 is not let to read it: files of the kernel that claim no size
    // (/proc/kmsg) would make its reads wait for ever.
    auto const size = require_input_file(_path, std::numeric_limits<std::uint64_t>::max(), "HDF5 file");
    TESSEL_REQUIRE(size > 0, _path, ": not an HDF5 file (it is empty)");
    htri_t const is_hdf5 = H5Fis_hdf5(_path.c_str());
    TESSEL_REQUIRE(is_hdf5 > 0, _path, ": not an HDF5 file (no HDF5 signature found)", hdf5_reason());
    _id = H5Fopen(_path.c_str(), mode == Mode::read ? H5F_ACC_RDONLY : H5F_ACC_RDWR, H5P_DEFAULT);
    TESSEL_REQUIRE(_id >= 0, _path, ": cannot open the HDF5 file; it may be truncated or corrupt", hdf5_reason());
  } else {
    // A new file is written beside its path and appears there only in close(), complete and verified.
    _output = std::make_unique<OutputFile>(_path);
    // File format 1.8+ gives object headers checksums, so corrupt metadata is detected, not misread.
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    _id = H5Fcreate(_output->temporary_path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
    TESSEL_REQUIRE(_id >= 0, "cannot write '", _path, "': HDF5 cannot create the file", hdf5_reason());
  }
}

File::~File() {
  if (_id >= 0)
    H5Fclose(_id); // an unclosed new file is discarded with its temporary (see close())
}

File::File(File &&other) noexcept
    : _path(std::move(other._path)), _id(other._id), _writable(other._writable), _output(std::move(other._output)) {
  other._id = -1;
}

File &File::operator=(File &&other) noexcept {
  if (this != &other) {
    if (_id >= 0)
      H5Fclose(_id);
    _path = std::move(other._path);
    _id = other._id;
    _writable = other._writable;
    _output = std::move(other._output);
    other._id = -1;
  }
  return *this;
}

void File::require_written(bool ok, std::string const &step) const {
  if (!ok)
    TESSEL_THROW("cannot write '", _path, "': ", step, " failed", hdf5_reason(),
                 _output ? " (nothing was written in its place)" : "");
}

void File::flush() {
  if (_id >= 0 && _writable)
    require_written(H5Fflush(_id, H5F_SCOPE_LOCAL) >= 0, "flushing the file");
}

void File::close() {
  if (_id < 0)
    return;
  hid_t const id = _id;
  _id = -1;
  // A full disk shows in the flush or the close, not necessarily in the writes before them.
  std::string reason;
  bool ok = !_writable || H5Fflush(id, H5F_SCOPE_LOCAL) >= 0;
  if (!ok)
    reason = hdf5_reason();
  if (H5Fclose(id) < 0 && ok) {
    ok = false;
    reason = hdf5_reason();
  }
  TESSEL_REQUIRE(ok, "cannot write '", _path, "'", reason, _output ? " (nothing was written in its place)" : "");
  if (!_output)
    return;
  // Verified as a reader will see it before it replaces anything.
  hid_t const check = H5Fopen(_output->temporary_path().c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  TESSEL_REQUIRE(check >= 0, "cannot write '", _path, "': the written file does not read back", hdf5_reason(),
                 " (nothing was written in its place)");
  H5Fclose(check);
  _output->commit();
  _output.reset();
}

bool File::has(std::string const &name) const {
  std::string const full = normalize(name);
  if (full == "/")
    return true;
  // Each component must exist before the next can be asked about.
  std::size_t pos = 1;
  while (true) {
    auto const slash = full.find('/', pos);
    std::string const prefix = full.substr(0, slash);
    if (H5Lexists(_id, prefix.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (slash == std::string::npos)
      return H5Oexists_by_name(_id, full.c_str(), H5P_DEFAULT) > 0;
    pos = slash + 1;
  }
}

bool File::has_attribute(std::string const &object, std::string const &name) const {
  if (!has(object))
    return false;
  htri_t const found = H5Aexists_by_name(_id, normalize(object).c_str(), name.c_str(), H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  return found > 0;
}

std::vector<std::string> File::list(std::string const &group) const {
  TESSEL_REQUIRE(has(group), _path, ": group '", group, "' not found");
  Handle g(H5Gopen2(_id, normalize(group).c_str(), H5P_DEFAULT), H5Gclose);
  TESSEL_REQUIRE(g.valid(), _path, ": '", group, "' is not a group", hdf5_reason());
  H5G_info_t info;
  H5Gget_info(g.get(), &info);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t const len = H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    std::string name(static_cast<std::size_t>(len), '\0');
    H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1, H5P_DEFAULT);
    names.push_back(name);
  }
  return names;
}

void File::create_group(std::string const &group) {
  TESSEL_REQUIRE(_writable, _path, ": opened read-only, cannot create group '", group, "'");
  if (has(group))
    return;
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle g(H5Gcreate2(_id, normalize(group).c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  require_written(g.valid(), "creating group '" + group + "'");
}

std::size_t File::element_count(std::vector<std::size_t> const &shape) {
  std::size_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

std::size_t File::checked_count(std::string const &dataset, std::vector<std::size_t> const &shape,
                                std::size_t element_bytes) const {
  // The shape is what the file declares: a tiny file may declare 2^40 elements.
  double bytes = static_cast<double>(element_bytes);
  for (auto d : shape)
    bytes *= static_cast<double>(d);
  require_memory(_path + ": dataset '" + dataset + "' of shape " + to_string(shape), bytes, SizeSource::input);
  return element_count(shape);
}

std::vector<std::size_t> File::shape(std::string const &dataset) const { return checked_shape(dataset, {}, false); }

std::vector<std::size_t> File::checked_shape(std::string const &dataset, std::vector<std::size_t> const &expected,
                                             bool check) const {
  TESSEL_REQUIRE(has(dataset), _path, ": dataset '", dataset, "' not found");
  Handle d(H5Dopen2(_id, normalize(dataset).c_str(), H5P_DEFAULT), H5Dclose);
  TESSEL_REQUIRE(d.valid(), _path, ": '", dataset, "' is not a dataset", hdf5_reason());
  Handle space(H5Dget_space(d.get()), H5Sclose);
  int const rank = H5Sget_simple_extent_ndims(space.get());
  TESSEL_REQUIRE(rank >= 0, _path, ": dataset '", dataset, "' has an unreadable dataspace", hdf5_reason());
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  std::vector<std::size_t> shape(dims.begin(), dims.end());
  TESSEL_REQUIRE(rank <= 2, _path, ": dataset '", dataset, "' has shape ", to_string(shape),
                 "; Tessel reads scalars, 1-D and 2-D datasets");
  if (check) {
    bool ok = shape.size() == expected.size();
    for (std::size_t i = 0; ok && i < shape.size(); ++i)
      ok = expected[i] == any || expected[i] == shape[i];
    TESSEL_REQUIRE(ok, _path, ": dataset '", dataset, "' has shape ", to_string(shape), ", expected ",
                   to_string(expected));
  }
  return shape;
}

DataType File::dtype(std::string const &dataset) const {
  TESSEL_REQUIRE(has(dataset), _path, ": dataset '", dataset, "' not found");
  Handle d(H5Dopen2(_id, normalize(dataset).c_str(), H5P_DEFAULT), H5Dclose);
  TESSEL_REQUIRE(d.valid(), _path, ": '", dataset, "' is not a dataset", hdf5_reason());
  Handle type(H5Dget_type(d.get()), H5Tclose);
  auto const found = info_of(type.get());
  TESSEL_REQUIRE(found.cls == H5T_INTEGER || found.cls == H5T_FLOAT, _path, ": dataset '", dataset, "' holds ",
                 describe(found), ", not numbers");
  return to_data_type(found);
}

void File::read_raw(std::string const &dataset, DataType type, void *out, std::size_t count, std::size_t first_row,
                    std::optional<std::size_t> rows) const {
  Handle d(H5Dopen2(_id, normalize(dataset).c_str(), H5P_DEFAULT), H5Dclose);
  TESSEL_REQUIRE(d.valid(), _path, ": cannot open dataset '", dataset, "'", hdf5_reason());
  Handle ftype(H5Dget_type(d.get()), H5Tclose);
  auto const found = info_of(ftype.get());
  auto const wanted = info_of(type);
  TESSEL_REQUIRE(lossless(found, wanted), _path, ": dataset '", dataset, "' has type ", describe(found), ", expected ",
                 name_of(type), " (or a type that converts to it without loss)");
  if (count == 0)
    return;
  herr_t rc = 0;
  if (rows) {
    // A hyperslab of whole rows: the file reads only them.
    Handle file_space(H5Dget_space(d.get()), H5Sclose);
    int const rank = H5Sget_simple_extent_ndims(file_space.get());
    std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
    H5Sget_simple_extent_dims(file_space.get(), dims.data(), nullptr);
    std::vector<hsize_t> start(dims.size(), 0), extent = dims;
    start[0] = first_row;
    extent[0] = *rows;
    TESSEL_REQUIRE(
        H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr) >= 0,
        _path, ": cannot select rows of dataset '", dataset, "'", hdf5_reason());
    Handle memory_space(H5Screate_simple(static_cast<int>(extent.size()), extent.data(), nullptr), H5Sclose);
    rc = H5Dread(d.get(), native_type(type), memory_space.get(), file_space.get(), H5P_DEFAULT, out);
  } else {
    rc = H5Dread(d.get(), native_type(type), H5S_ALL, H5S_ALL, H5P_DEFAULT, out);
  }
  TESSEL_REQUIRE(rc >= 0, _path, ": reading dataset '", dataset, "' failed; the file may be truncated or corrupt",
                 hdf5_reason());
}

void File::write_raw(std::string const &dataset, DataType type, void const *data,
                     std::vector<std::size_t> const &shape) {
  TESSEL_REQUIRE(_writable, _path, ": opened read-only, cannot write '", dataset, "'");
  TESSEL_REQUIRE(shape.size() <= 2, _path, ": dataset '", dataset, "': Tessel writes 1-D and 2-D datasets, got shape ",
                 to_string(shape));
  std::string const full = normalize(dataset);
  if (has(full))
    H5Ldelete(_id, full.c_str(), H5P_DEFAULT);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space(shape.empty() ? H5Screate(H5S_SCALAR)
                             : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
               H5Sclose);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  // Chunks with Fletcher-32 checksums: a damaged file fails to read instead of returning altered values.
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (!shape.empty() && element_count(shape) > 0) {
    std::size_t const row_bytes = size_of(type) * (shape.size() == 2 ? shape[1] : 1);
    std::vector<hsize_t> chunk = dims;
    chunk[0] =
        std::max<hsize_t>(1, std::min<hsize_t>(dims[0], (std::size_t{1} << 20) / std::max<std::size_t>(1, row_bytes)));
    H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
    H5Pset_fletcher32(dcpl.get());
  }
  Handle d(H5Dcreate2(_id, full.c_str(), native_type(type), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
           H5Dclose);
  require_written(d.valid(), "creating dataset '" + dataset + "'");
  if (element_count(shape) > 0)
    require_written(H5Dwrite(d.get(), native_type(type), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0,
                    "writing dataset '" + dataset + "'");
}

std::vector<std::string> File::read_strings(std::string const &dataset) const {
  auto const shape = checked_shape(dataset, {any}, true);
  Handle d(H5Dopen2(_id, normalize(dataset).c_str(), H5P_DEFAULT), H5Dclose);
  Handle ftype(H5Dget_type(d.get()), H5Tclose);
  TESSEL_REQUIRE(H5Tget_class(ftype.get()) == H5T_STRING, _path, ": dataset '", dataset, "' has type ",
                 describe(info_of(ftype.get())), ", expected strings");
  std::vector<std::string> out(checked_count(dataset, shape, sizeof(std::string)));
  if (out.empty())
    return out;
  if (H5Tis_variable_str(ftype.get()) > 0) {
    Handle mtype(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mtype.get(), H5T_VARIABLE);
    H5Tset_cset(mtype.get(), H5Tget_cset(ftype.get()));
    std::vector<char *> raw(out.size(), nullptr);
    TESSEL_REQUIRE(H5Dread(d.get(), mtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) >= 0, _path,
                   ": reading strings '", dataset, "' failed", hdf5_reason());
    for (std::size_t i = 0; i < raw.size(); ++i)
      out[i] = raw[i] ? raw[i] : "";
    Handle space(H5Dget_space(d.get()), H5Sclose);
    H5Dvlen_reclaim(mtype.get(), space.get(), H5P_DEFAULT, raw.data());
  } else {
    std::size_t const width = H5Tget_size(ftype.get());
    std::vector<char> raw(width * out.size());
    TESSEL_REQUIRE(H5Dread(d.get(), ftype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) >= 0, _path,
                   ": reading strings '", dataset, "' failed", hdf5_reason());
    for (std::size_t i = 0; i < out.size(); ++i) {
      char const *s = raw.data() + i * width;
      out[i].assign(s, std::find(s, s + width, '\0'));
    }
  }
  return out;
}

void File::write_strings(std::string const &dataset, std::vector<std::string> const &values) {
  TESSEL_REQUIRE(_writable, _path, ": opened read-only, cannot write '", dataset, "'");
  std::string const full = normalize(dataset);
  if (has(full))
    H5Ldelete(_id, full.c_str(), H5P_DEFAULT);
  hsize_t const n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle d(H5Dcreate2(_id, full.c_str(), type.get(), space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  require_written(d.valid(), "creating dataset '" + dataset + "'");
  std::vector<char const *> raw(values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    raw[i] = values[i].c_str();
  if (!raw.empty())
    require_written(H5Dwrite(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) >= 0,
                    "writing strings '" + dataset + "'");
}

std::size_t File::attribute_size(std::string const &object, std::string const &name) const {
  TESSEL_REQUIRE(has_attribute(object, name), _path, ": attribute '", name, "' of '", object, "' not found");
  Handle a(H5Aopen_by_name(_id, normalize(object).c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  Handle space(H5Aget_space(a.get()), H5Sclose);
  hssize_t const n = H5Sget_simple_extent_npoints(space.get());
  return n < 0 ? 0 : static_cast<std::size_t>(n);
}

void File::read_attribute_raw(std::string const &object, std::string const &name, DataType type, void *out,
                              std::size_t count) const {
  std::size_t const found_count = attribute_size(object, name);
  TESSEL_REQUIRE(found_count == count, _path, ": attribute '", name, "' of '", object, "' has ", found_count,
                 " values, expected ", count);
  Handle a(H5Aopen_by_name(_id, normalize(object).c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  Handle ftype(H5Aget_type(a.get()), H5Tclose);
  auto const found = info_of(ftype.get());
  TESSEL_REQUIRE(lossless(found, info_of(type)), _path, ": attribute '", name, "' of '", object, "' has type ",
                 describe(found), ", expected ", name_of(type));
  TESSEL_REQUIRE(H5Aread(a.get(), native_type(type), out) >= 0, _path, ": reading attribute '", name, "' failed",
                 hdf5_reason());
}

std::string File::read_string_attribute(std::string const &object, std::string const &name) const {
  TESSEL_REQUIRE(has_attribute(object, name), _path, ": attribute '", name, "' of '", object, "' not found");
  Handle a(H5Aopen_by_name(_id, normalize(object).c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  Handle ftype(H5Aget_type(a.get()), H5Tclose);
  TESSEL_REQUIRE(H5Tget_class(ftype.get()) == H5T_STRING, _path, ": attribute '", name, "' of '", object, "' has type ",
                 describe(info_of(ftype.get())), ", expected a string");
  if (H5Tis_variable_str(ftype.get()) > 0) {
    Handle mtype(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mtype.get(), H5T_VARIABLE);
    H5Tset_cset(mtype.get(), H5Tget_cset(ftype.get()));
    char *raw = nullptr;
    TESSEL_REQUIRE(H5Aread(a.get(), mtype.get(), &raw) >= 0, _path, ": reading attribute '", name, "' failed",
                   hdf5_reason());
    std::string value = raw ? raw : "";
    H5free_memory(raw);
    return value;
  }
  std::size_t const width = H5Tget_size(ftype.get());
  std::string raw(width, '\0');
  TESSEL_REQUIRE(H5Aread(a.get(), ftype.get(), raw.data()) >= 0, _path, ": reading attribute '", name, "' failed",
                 hdf5_reason());
  return raw.substr(0, raw.find('\0'));
}

void File::write_attribute_raw(std::string const &object, std::string const &name, DataType type, void const *data,
                               std::size_t count, bool scalar) {
  TESSEL_REQUIRE(_writable, _path, ": opened read-only, cannot write attribute '", name, "'");
  TESSEL_REQUIRE(has(object), _path, ": cannot attach attribute '", name, "': '", object, "' not found");
  std::string const obj = normalize(object);
  if (has_attribute(obj, name))
    H5Adelete_by_name(_id, obj.c_str(), name.c_str(), H5P_DEFAULT);
  hsize_t const n = count;
  Handle space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose);
  Handle a(H5Acreate_by_name(_id, obj.c_str(), name.c_str(), native_type(type), space.get(), H5P_DEFAULT, H5P_DEFAULT,
                             H5P_DEFAULT),
           H5Aclose);
  require_written(a.valid(), "creating attribute '" + name + "' of '" + object + "'");
  require_written(H5Awrite(a.get(), native_type(type), data) >= 0, "writing attribute '" + name + "'");
}

void File::write_attribute(std::string const &object, std::string const &name, std::string const &value) {
  TESSEL_REQUIRE(_writable, _path, ": opened read-only, cannot write attribute '", name, "'");
  TESSEL_REQUIRE(has(object), _path, ": cannot attach attribute '", name, "': '", object, "' not found");
  std::string const obj = normalize(object);
  if (has_attribute(obj, name))
    H5Adelete_by_name(_id, obj.c_str(), name.c_str(), H5P_DEFAULT);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle a(
      H5Acreate_by_name(_id, obj.c_str(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      H5Aclose);
  require_written(a.valid(), "creating attribute '" + name + "' of '" + object + "'");
  char const *raw = value.c_str();
  require_written(H5Awrite(a.get(), type.get(), &raw) >= 0, "writing attribute '" + name + "'");
}

} // namespace tessel::h5
