#include "worker/data/npy.h"

#include <cstring>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace tagi::data {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;

struct TypeEntry {
  std::string_view descr;
  NpyType type;
};
// '|' marks byte-sized types; '<' little-endian ones; '=' is native, which
// a file written on a little-endian host also says for byte-sized types.
constexpr TypeEntry kTypes[] = {
    {"<f4", NpyType::kFloat32}, {"<f8", NpyType::kFloat64}, {"|u1", NpyType::kUint8},
    {"|i1", NpyType::kInt8},    {"<i2", NpyType::kInt16},   {"<i4", NpyType::kInt32},
    {"<i8", NpyType::kInt64},   {"<u2", NpyType::kUint16},  {"<u4", NpyType::kUint32},
    {"<u8", NpyType::kUint64},  {"|b1", NpyType::kBool},    {"<u1", NpyType::kUint8},
    {"<i1", NpyType::kInt8},    {"=u1", NpyType::kUint8},
};

absl::Status Bad(const std::string& name, const std::string& fault) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": not a valid NPY file: ", fault));
}

// A cursor over the header dict.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}
  void SkipSpaces() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }
  bool Eat(char c) {
    SkipSpaces();
    if (pos_ < text_.size() && text_[pos_] == c) return ++pos_, true;
    return false;
  }
  std::optional<std::string_view> Quoted() {
    SkipSpaces();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) return std::nullopt;
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) return std::nullopt;
    std::string_view out = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }
  std::optional<bool> Bool() {
    SkipSpaces();
    for (const auto& [word, value] :
         {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}}) {
      if (text_.substr(pos_, word.size()) == word) return pos_ += word.size(), value;
    }
    return std::nullopt;
  }
  std::optional<uint64_t> Integer() {
    SkipSpaces();
    uint64_t v = 0;
    size_t digits = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      if (++digits > 18) return std::nullopt;  // far past any cap
      v = v * 10 + static_cast<uint64_t>(text_[pos_++] - '0');
    }
    if (digits == 0) return std::nullopt;
    return v;
  }
  bool AtEnd() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n')) ++pos_;
    return pos_ == text_.size();
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

absl::StatusOr<std::vector<uint64_t>> ParseShape(HeaderParser& p, const std::string& name) {
  if (!p.Eat('(')) return Bad(name, "'shape' is not a tuple");
  std::vector<uint64_t> shape;
  while (!p.Eat(')')) {
    const std::optional<uint64_t> dim = p.Integer();
    if (!dim) return Bad(name, "'shape' holds something other than non-negative integers");
    if (shape.size() == kMaxNpyRank) {
      return Bad(name, absl::StrCat("rank above ", kMaxNpyRank));
    }
    shape.push_back(*dim);
    if (!p.Eat(',')) {
      if (!p.Eat(')')) return Bad(name, "'shape' tuple is not closed");
      break;
    }
  }
  return shape;
}

struct Header {
  std::optional<NpyType> type;
  std::optional<bool> fortran;
  std::vector<uint64_t> shape;
  bool has_shape = false;
};

absl::Status ParseEntry(HeaderParser& p, const std::string& name, Header& h) {
  const std::optional<std::string_view> key = p.Quoted();
  if (!key || !p.Eat(':')) return Bad(name, "header is not a dict of 'key': value");
  if (*key == "descr" && !h.type) {
    const std::optional<std::string_view> descr = p.Quoted();
    if (!descr) return Bad(name, "'descr' is not a string (structured types are not read)");
    for (const TypeEntry& t : kTypes) {
      if (t.descr == *descr) h.type = t.type;
    }
    if (!h.type) {
      const bool big = !descr->empty() && (*descr)[0] == '>';
      return Bad(name, big ? "big-endian element type (save with '<' byte order)"
                           : "element type is not one of float32, float64, uint8, int8-64, "
                             "uint16-64, bool");
    }
  } else if (*key == "fortran_order" && !h.fortran) {
    h.fortran = p.Bool();
    if (!h.fortran) return Bad(name, "'fortran_order' is not True or False");
  } else if (*key == "shape" && !h.has_shape) {
    TAGI_ASSIGN_OR_RETURN(h.shape, ParseShape(p, name));
    h.has_shape = true;
  } else {
    return Bad(name, "header has an unknown or repeated key");
  }
  return absl::OkStatus();
}

absl::StatusOr<Header> ParseHeader(std::string_view text, const std::string& name) {
  HeaderParser p(text);
  if (!p.Eat('{')) return Bad(name, "header does not start with '{'");
  Header h;
  while (!p.Eat('}')) {
    TAGI_RETURN_IF_ERROR(ParseEntry(p, name, h));
    if (!p.Eat(',')) {
      if (!p.Eat('}')) return Bad(name, "header dict is not closed");
      break;
    }
  }
  if (!p.AtEnd()) return Bad(name, "bytes after the header dict");
  if (!h.type || !h.fortran || !h.has_shape) {
    return Bad(name, "header lacks 'descr', 'fortran_order' or 'shape'");
  }
  if (*h.fortran) {
    return Bad(name, "Fortran-order arrays are not read (save a C-order array)");
  }
  return h;
}

}  // namespace

uint64_t NpyArray::count() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

size_t ElementBytes(NpyType type) {
  switch (type) {
    case NpyType::kUint8:
    case NpyType::kInt8:
    case NpyType::kBool:
      return 1;
    case NpyType::kInt16:
    case NpyType::kUint16:
      return 2;
    case NpyType::kFloat32:
    case NpyType::kInt32:
    case NpyType::kUint32:
      return 4;
    default:
      return 8;
  }
}

const char* NpyTypeName(NpyType type) {
  switch (type) {
    case NpyType::kFloat32:
      return "float32";
    case NpyType::kFloat64:
      return "float64";
    case NpyType::kUint8:
      return "uint8";
    case NpyType::kInt8:
      return "int8";
    case NpyType::kInt16:
      return "int16";
    case NpyType::kInt32:
      return "int32";
    case NpyType::kInt64:
      return "int64";
    case NpyType::kUint16:
      return "uint16";
    case NpyType::kUint32:
      return "uint32";
    case NpyType::kUint64:
      return "uint64";
    case NpyType::kBool:
      return "bool";
  }
  return "?";
}

bool IsFloat(NpyType type) { return type == NpyType::kFloat32 || type == NpyType::kFloat64; }

absl::StatusOr<NpyArray> ParseNpy(std::span<const uint8_t> bytes, const std::string& name,
                                  uint64_t max_bytes) {
  if (bytes.size() < kMagicBytes + 4 || std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0) {
    return Bad(name, "no \\x93NUMPY magic (or shorter than one)");
  }
  const uint8_t major = bytes[6];
  size_t header_len = 0;
  size_t offset = 0;
  if (major == 1) {
    header_len = bytes[8] | (size_t{bytes[9]} << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Bad(name, "truncated in the header length");
    header_len =
        bytes[8] | (size_t{bytes[9]} << 8) | (size_t{bytes[10]} << 16) | (size_t{bytes[11]} << 24);
    offset = 12;
  } else {
    return Bad(name, absl::StrFormat("format version %d is not 1, 2 or 3", major));
  }
  if (header_len > kMaxNpyHeaderBytes) {
    return Bad(name,
               absl::StrCat("header of ", header_len, " bytes (at most ", kMaxNpyHeaderBytes, ")"));
  }
  if (bytes.size() - offset < header_len) return Bad(name, "truncated in the header");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + offset), header_len);
  TAGI_ASSIGN_OR_RETURN(const Header h, ParseHeader(text, name));
  NpyArray out;
  out.type = *h.type;
  out.shape = h.shape;
  const uint64_t element = ElementBytes(out.type);
  uint64_t total = element;
  for (uint64_t d : out.shape) {
    if (d != 0 && total > max_bytes / d) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": the array's shape claims more than the ", max_bytes, "-byte limit"));
    }
    total *= d;
  }
  const uint64_t present = bytes.size() - offset - header_len;
  if (present < total) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: truncated NPY file: its shape needs %d bytes of %s data, %d are present", name, total,
        NpyTypeName(out.type), present));
  }
  if (present > total) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: NPY file has %d trailing bytes after its %d bytes of data", name,
                        present - total, total));
  }
  out.data = bytes.subspan(offset + header_len, total);
  return out;
}

double NpyElement(const NpyArray& a, uint64_t i) {
  const uint8_t* p = a.data.data() + i * ElementBytes(a.type);
  auto get = [p]<typename T>(T) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return static_cast<double>(v);
  };
  switch (a.type) {
    case NpyType::kFloat32:
      return get(float{});
    case NpyType::kFloat64:
      return get(double{});
    case NpyType::kUint8:
      return get(uint8_t{});
    case NpyType::kInt8:
      return get(int8_t{});
    case NpyType::kInt16:
      return get(int16_t{});
    case NpyType::kInt32:
      return get(int32_t{});
    case NpyType::kInt64:
      return get(int64_t{});
    case NpyType::kUint16:
      return get(uint16_t{});
    case NpyType::kUint32:
      return get(uint32_t{});
    case NpyType::kUint64:
      return get(uint64_t{});
    case NpyType::kBool:
      return p[0] != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

std::string EncodeNpyFloat32(const std::vector<uint64_t>& shape, std::span<const float> values) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (uint64_t d : shape) absl::StrAppend(&dict, d, shape.size() == 1 ? "," : ", ");
  absl::StrAppend(&dict, "), }");
  while ((kMagicBytes + 4 + dict.size() + 1) % 64 != 0) dict.push_back(' ');
  dict.push_back('\n');
  std::string out(kMagic, kMagicBytes);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>(dict.size() >> 8));
  out += dict;
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return out;
}

}  // namespace tagi::data
