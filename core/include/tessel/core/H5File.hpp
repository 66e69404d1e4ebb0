#ifndef TESSEL_CORE_H5FILE_HPP
#define TESSEL_CORE_H5FILE_HPP

/// \file H5File.hpp
/// \brief HDF5 I/O for 1-D and 2-D numeric datasets, string datasets, attributes and groups, with errors that
/// name the file, the object, and the expected and found shape or type. Only present with Tessel_ENABLE_HDF5.

#include <tessel/core/Config.hpp>
#include <tessel/core/DataType.hpp>
#include <tessel/core/Error.hpp>
#include <tessel/core/KokkosCompat.hpp>
#include <tessel/core/OutputFile.hpp>

#ifndef TESSEL_ENABLE_HDF5
#error "tessel/core/H5File.hpp needs a Tessel built with Tessel_ENABLE_HDF5=ON"
#endif

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace tessel::h5 {

/// \brief How File opens its path.
enum class Mode {
  read,     ///< read-only; the file must exist
  truncate, ///< create, replacing any existing file
  append    ///< read-write; created when missing
};

/// \brief Wildcard for one dimension of an expected shape.
inline constexpr std::size_t any = std::numeric_limits<std::size_t>::max();

/// \brief A dataset read into host memory: row-major values and the dataset's shape (empty for a scalar).
template <class T> struct Array {
  std::vector<T> data;            ///< the values, row-major
  std::vector<std::size_t> shape; ///< the dataset's extents
  /// The first extent (1 for a scalar).
  std::size_t rows() const { return shape.empty() ? 1 : shape[0]; }
  /// The second extent (1 for fewer than two dimensions).
  std::size_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
};

/// \brief Formats a shape as "(3, 4)"; any is printed as "*".
std::string to_string(std::vector<std::size_t> const &shape);

/// \brief An open HDF5 file. Move-only.
///
/// A file opened with Mode::truncate is written beside its path and appears there only when close() succeeds,
/// complete and read back: a full disk or any failed write is an error naming the file, and leaves what was at
/// the path untouched. Destroying it without close() discards it. Mode::append changes an existing file in place
/// (close() reports whether that succeeded); Mode::read files close on destruction.
///
/// Reading converts only where no value can change: within integers or within floats, to an equal or wider
/// type (and unsigned to a wider signed type). Anything else is an error naming the found and expected types.
class File {
public:
  /// Opens (or, for Mode::truncate, starts) \p path; throws naming the file when that fails.
  File(std::string path, Mode mode = Mode::read);
  /// Closes a file opened for reading or appending; discards one opened with Mode::truncate and not closed.
  ~File();
  /// \name Move-only
  //@{
  /// Move-only.
  File(File &&other) noexcept;
  File &operator=(File &&other) noexcept;
  File(File const &) = delete;
  File &operator=(File const &) = delete;
  //@}

  /// The path the file was opened with.
  std::string const &path() const { return _path; }

  /// True when \p name (a path such as "graph/indptr") names a dataset or group.
  bool has(std::string const &name) const;
  /// True when \p object ("/" for the file) carries attribute \p name.
  bool has_attribute(std::string const &object, std::string const &name) const;
  /// Names of the members of \p group.
  std::vector<std::string> list(std::string const &group = "/") const;
  /// Creates \p group and any missing parents (no-op when it exists).
  void create_group(std::string const &group);

  /// Shape of a dataset (empty for a scalar).
  std::vector<std::size_t> shape(std::string const &dataset) const;
  /// Element type of a numeric dataset.
  DataType dtype(std::string const &dataset) const;

  /// \brief Reads a numeric dataset of rank 0, 1 or 2 as T.
  template <class T> Array<T> read(std::string const &dataset) const {
    Array<T> out;
    out.shape = checked_shape(dataset, {}, /*check=*/false);
    out.data.resize(checked_count(dataset, out.shape, sizeof(T)));
    read_raw(dataset, data_type_of<T>, out.data.data(), out.data.size());
    return out;
  }
  /// \brief Reads a numeric dataset whose shape must be \p expected (use h5::any for free dimensions).
  template <class T> Array<T> read(std::string const &dataset, std::vector<std::size_t> const &expected) const {
    Array<T> out;
    out.shape = checked_shape(dataset, expected, /*check=*/true);
    out.data.resize(checked_count(dataset, out.shape, sizeof(T)));
    read_raw(dataset, data_type_of<T>, out.data.data(), out.data.size());
    return out;
  }
  /// \brief Reads rows [\p first, \p first + \p count) of a 1-D or 2-D numeric dataset as T (a hyperslab: only
  /// those rows are read from the file). Throws naming the file and dataset when the range exceeds its rows.
  template <class T> Array<T> read_rows(std::string const &dataset, std::size_t first, std::size_t count) const {
    Array<T> out;
    out.shape = checked_shape(dataset, {}, /*check=*/false);
    TESSEL_REQUIRE(out.shape.size() == 1 || out.shape.size() == 2, _path, ": dataset '", dataset, "' has rank ",
                   out.shape.size(), ", expected 1 or 2 for a read of rows");
    TESSEL_REQUIRE(first <= out.shape[0] && count <= out.shape[0] - first, _path, ": dataset '", dataset, "' has ",
                   out.shape[0], " rows, cannot read rows [", first, ", ", first + count, ")");
    out.shape[0] = count;
    out.data.resize(checked_count(dataset, out.shape, sizeof(T)));
    read_raw(dataset, data_type_of<T>, out.data.data(), out.data.size(), first, count);
    return out;
  }
  /// \brief Reads a 1-D or 2-D dataset into a View of the same extents (any layout or memory space).
  template <class View, std::enable_if_t<compat::is_view_v<View>, int> = 0>
  void read(std::string const &dataset, View const &view) const {
    constexpr int rank = compat::view_rank<View>();
    static_assert(rank == 1 || rank == 2, "h5::File reads 1-D and 2-D datasets");
    using T = typename View::non_const_value_type;
    std::vector<std::size_t> expected{view.extent(0)};
    if (rank == 2)
      expected.push_back(view.extent(1));
    auto const array = read<T>(dataset, expected);
    auto mirror = Kokkos::create_mirror_view(view);
    copy_into(array.data, mirror);
    Kokkos::deep_copy(view, mirror);
  }

  /// \brief Writes (or replaces) a numeric dataset of the given row-major shape; parent groups are created.
  template <class T> void write(std::string const &dataset, T const *data, std::vector<std::size_t> const &shape) {
    write_raw(dataset, data_type_of<T>, data, shape);
  }
  /// \brief Writes (or replaces) a 1-D numeric dataset.
  template <class T> void write(std::string const &dataset, std::vector<T> const &data) {
    write_raw(dataset, data_type_of<T>, data.data(), {data.size()});
  }
  /// \brief Writes a 1-D or 2-D View (any layout or memory space) as a row-major dataset.
  template <class View, std::enable_if_t<compat::is_view_v<View>, int> = 0>
  void write(std::string const &dataset, View const &view) {
    constexpr int rank = compat::view_rank<View>();
    static_assert(rank == 1 || rank == 2, "h5::File writes 1-D and 2-D datasets");
    using T = typename View::non_const_value_type;
    auto mirror = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
    std::vector<T> data(mirror.size());
    copy_from(mirror, data);
    std::vector<std::size_t> shape{view.extent(0)};
    if (rank == 2)
      shape.push_back(view.extent(1));
    write_raw(dataset, data_type_of<T>, data.data(), shape);
  }

  /// \brief Reads a 1-D dataset of strings (fixed or variable length).
  std::vector<std::string> read_strings(std::string const &dataset) const;
  /// \brief Writes a 1-D dataset of variable-length UTF-8 strings.
  void write_strings(std::string const &dataset, std::vector<std::string> const &values);

  /// \brief Reads a scalar numeric attribute of \p object ("/" for the file) as T.
  template <class T> T read_attribute(std::string const &object, std::string const &name) const {
    T value{};
    read_attribute_raw(object, name, data_type_of<T>, &value, 1);
    return value;
  }
  /// \brief Reads a 1-D numeric attribute.
  template <class T> std::vector<T> read_attribute_array(std::string const &object, std::string const &name) const {
    std::vector<T> values(checked_count(object + " attribute " + name, {attribute_size(object, name)}, sizeof(T)));
    read_attribute_raw(object, name, data_type_of<T>, values.data(), values.size());
    return values;
  }
  /// \brief Reads a string attribute.
  std::string read_string_attribute(std::string const &object, std::string const &name) const;

  /// \name Write (or replace) an attribute of \p object ("/" for the file): a scalar, a 1-D array or a string
  //@{
  /// Write (or replace) an attribute of \p object ("/" for the file): a scalar, a 1-D array or a string.
  template <class T> void write_attribute(std::string const &object, std::string const &name, T value) {
    write_attribute_raw(object, name, data_type_of<T>, &value, 1, /*scalar=*/true);
  }
  template <class T>
  void write_attribute(std::string const &object, std::string const &name, std::vector<T> const &values) {
    write_attribute_raw(object, name, data_type_of<T>, values.data(), values.size(), /*scalar=*/false);
  }
  void write_attribute(std::string const &object, std::string const &name, std::string const &value);
  void write_attribute(std::string const &object, std::string const &name, char const *value) {
    write_attribute(object, name, std::string(value));
  }
  //@}

  /// Flushes buffered data to the file; throws naming the file when that fails.
  void flush();
  /// Flushes and closes; a new file (Mode::truncate) then replaces its path. Throws naming the file on failure.
  void close();

private:
  static std::size_t element_count(std::vector<std::size_t> const &shape);
  /// element_count() of a dataset about to be read into memory, refused naming the dataset and its size when this
  /// machine's memory cannot hold it.
  std::size_t checked_count(std::string const &dataset, std::vector<std::size_t> const &shape,
                            std::size_t element_bytes) const;
  /// Throws "cannot write PATH: STEP failed" with HDF5's reason when \p ok is false.
  void require_written(bool ok, std::string const &step) const;
  std::vector<std::size_t> checked_shape(std::string const &dataset, std::vector<std::size_t> const &expected,
                                         bool check) const;
  /// Reads \p count elements; with \p rows given, only rows [first_row, first_row + *rows) of the dataset.
  void read_raw(std::string const &dataset, DataType type, void *out, std::size_t count, std::size_t first_row = 0,
                std::optional<std::size_t> rows = std::nullopt) const;
  void write_raw(std::string const &dataset, DataType type, void const *data, std::vector<std::size_t> const &shape);
  std::size_t attribute_size(std::string const &object, std::string const &name) const;
  void read_attribute_raw(std::string const &object, std::string const &name, DataType type, void *out,
                          std::size_t count) const;
  void write_attribute_raw(std::string const &object, std::string const &name, DataType type, void const *data,
                           std::size_t count, bool scalar);

  template <class T, class Mirror> static void copy_into(std::vector<T> const &data, Mirror const &mirror) {
    if constexpr (compat::view_rank<Mirror>() == 1) {
      for (std::size_t i = 0; i < mirror.extent(0); ++i)
        mirror(i) = data[i];
    } else {
      std::size_t const cols = mirror.extent(1);
      for (std::size_t i = 0; i < mirror.extent(0); ++i)
        for (std::size_t j = 0; j < cols; ++j)
          mirror(i, j) = data[i * cols + j];
    }
  }
  template <class T, class Mirror> static void copy_from(Mirror const &mirror, std::vector<T> &data) {
    if constexpr (compat::view_rank<Mirror>() == 1) {
      for (std::size_t i = 0; i < mirror.extent(0); ++i)
        data[i] = mirror(i);
    } else {
      std::size_t const cols = mirror.extent(1);
      for (std::size_t i = 0; i < mirror.extent(0); ++i)
        for (std::size_t j = 0; j < cols; ++j)
          data[i * cols + j] = mirror(i, j);
    }
  }

  std::string _path;
  std::int64_t _id = -1; // hid_t
  bool _writable = false;
  std::unique_ptr<OutputFile> _output; // Mode::truncate: the temporary that close() renames into place
};

} // namespace tessel::h5

#endif
