// Writers of small NPY, NPZ, PNG and JPEG files for the data tests.
#ifndef TAGI_TESTS_DATA_DATA_FILES_H_
#define TAGI_TESTS_DATA_DATA_FILES_H_

#include <zip.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace tagi::data::testing {

// A version 1.0 .npy file of `descr` ('<f4', '|u1', '<i8', ...) and
// `shape` holding `payload` (raw little-endian bytes, not checked).
inline std::string Npy(const std::string& descr, const std::vector<uint64_t>& shape,
                       const std::string& payload) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (uint64_t d : shape) dict += std::to_string(d) + ", ";
  dict += "), }";
  while ((10 + dict.size() + 1) % 64 != 0) dict.push_back(' ');
  dict.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>(dict.size() >> 8));
  return out + dict + payload;
}

template <typename T>
std::string Raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A zip of `members` (name, bytes), each deflated when `deflate`, else
// stored. Empty on failure.
inline std::string Zip(const std::vector<std::pair<std::string, std::string>>& members,
                       bool deflate) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* out = zip_source_buffer_create(nullptr, 0, 0, &error);
  zip_t* z = zip_open_from_source(out, ZIP_TRUNCATE, &error);
  zip_source_keep(out);
  for (const auto& [name, bytes] : members) {
    zip_source_t* s = zip_source_buffer(z, bytes.data(), bytes.size(), 0);
    const zip_int64_t i = zip_file_add(z, name.c_str(), s, ZIP_FL_OVERWRITE);
    zip_set_file_compression(z, static_cast<zip_uint64_t>(i),
                             deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0);
  }
  zip_close(z);
  std::string result;
  zip_stat_t st;
  if (zip_source_stat(out, &st) == 0 && zip_source_open(out) == 0) {
    result.resize(st.size);
    zip_source_read(out, result.data(), st.size);
    zip_source_close(out);
  }
  zip_source_free(out);
  zip_error_fini(&error);
  return result;
}

}  // namespace tagi::data::testing

#endif  // TAGI_TESTS_DATA_DATA_FILES_H_
