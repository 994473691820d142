#include "worker/data/npz.h"

#include <zip.h>

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"

namespace tagi::data {
namespace {

struct ZipCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};
struct ZipFileCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

absl::Status Bad(const std::string& path, const std::string& fault) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": not a readable NPZ file: ", fault));
}

absl::StatusOr<std::vector<uint8_t>> ReadMember(zip_t* z, zip_uint64_t index, const zip_stat_t& st,
                                                const std::string& what, uint64_t max_bytes) {
  if ((st.valid & ZIP_STAT_SIZE) == 0 || (st.valid & ZIP_STAT_COMP_METHOD) == 0) {
    return Bad(what, "the directory gives no size or method");
  }
  if (st.comp_method != ZIP_CM_STORE && st.comp_method != ZIP_CM_DEFLATE) {
    return Bad(what, absl::StrCat("compression method ", st.comp_method,
                                  " (only stored and deflated members are read)"));
  }
  if ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) != 0 && st.encryption_method != ZIP_EM_NONE) {
    return Bad(what, "the member is encrypted");
  }
  if (st.size > max_bytes) {
    return Bad(what, absl::StrCat("the member is ", st.size, " bytes uncompressed; at most ",
                                  max_bytes, " are read"));
  }
  std::unique_ptr<zip_file_t, ZipFileCloser> f(zip_fopen_index(z, index, 0));
  if (!f) return Bad(what, zip_strerror(z));
  std::vector<uint8_t> out(st.size);
  uint64_t done = 0;
  uint8_t extra = 0;
  while (true) {
    // One byte past the declared size shows a member that inflates longer.
    uint8_t* dst = done < out.size() ? out.data() + done : &extra;
    const uint64_t room = done < out.size() ? std::min<uint64_t>(out.size() - done, 1u << 26) : 1;
    const zip_int64_t got = zip_fread(f.get(), dst, room);
    if (got < 0) return Bad(what, zip_file_strerror(f.get()));
    if (got == 0) break;
    if (done >= out.size()) return Bad(what, "the member inflates past its declared size");
    done += static_cast<uint64_t>(got);
  }
  if (done != out.size()) {
    return Bad(what, absl::StrCat("truncated member: ", done, " of ", out.size(), " bytes"));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::vector<uint8_t>>> ReadNpzMembers(
    std::span<const uint8_t> zip, const std::string& path, const std::vector<std::string>& wanted,
    uint64_t max_bytes) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(zip.data(), zip.size(), 0, &error);
  if (source == nullptr) {
    const std::string fault = zip_error_strerror(&error);
    zip_error_fini(&error);
    return Bad(path, fault);
  }
  std::unique_ptr<zip_t, ZipCloser> z(zip_open_from_source(source, ZIP_RDONLY, &error));
  if (!z) {
    zip_source_free(source);
    const std::string fault = zip_error_strerror(&error);
    zip_error_fini(&error);
    return Bad(path, fault);
  }
  zip_error_fini(&error);
  const zip_int64_t entries = zip_get_num_entries(z.get(), 0);
  if (entries < 0 || static_cast<uint64_t>(entries) > kMaxNpzEntries) {
    return Bad(path, absl::StrCat("the archive has ", entries, " entries; at most ", kMaxNpzEntries,
                                  " are read"));
  }
  std::map<std::string, std::vector<uint8_t>> out;
  for (const std::string& name : wanted) {
    const std::string member = name + ".npy";
    const zip_int64_t index = zip_name_locate(z.get(), member.c_str(), 0);
    if (index < 0) continue;
    zip_stat_t st;
    zip_stat_init(&st);
    const std::string what = absl::StrCat(path, " member ", member);
    if (zip_stat_index(z.get(), static_cast<zip_uint64_t>(index), 0, &st) != 0) {
      return Bad(what, zip_strerror(z.get()));
    }
    auto bytes = ReadMember(z.get(), static_cast<zip_uint64_t>(index), st, what, max_bytes);
    if (!bytes.ok()) return bytes.status();
    out.emplace(name, *std::move(bytes));
  }
  return out;
}

}  // namespace tagi::data
