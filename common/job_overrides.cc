#include "common/job_overrides.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace tagi {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Levenshtein distance, for "did you mean".
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      const bool same = absl::ascii_tolower(a[i - 1]) == absl::ascii_tolower(b[j - 1]);
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

const FieldDescriptor* FindField(const Descriptor* d, absl::string_view name) {
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->json_name() == name || f->name() == name) return f;
  }
  return nullptr;
}

std::string FieldNames(const Descriptor* d) {
  std::vector<std::string> names;
  for (int i = 0; i < d->field_count(); ++i) names.push_back(d->field(i)->json_name());
  return absl::StrJoin(names, ", ");
}

std::string UnknownField(const Descriptor* d, absl::string_view where, absl::string_view name) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (int i = 0; i < d->field_count(); ++i) {
    const std::string& candidate = d->field(i)->json_name();
    const size_t distance = EditDistance(name, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  std::string out = absl::StrCat(where.empty() ? "the job" : where, " has no field \"", name, "\"");
  if (!best.empty() && best_distance <= std::max<size_t>(2, name.size() / 3)) {
    absl::StrAppend(&out, " (did you mean \"", best, "\"?)");
  } else {
    absl::StrAppend(&out, "; its fields: ", FieldNames(d));
  }
  return out;
}

std::string EnumNames(const EnumDescriptor* e) {
  std::vector<std::string> names;
  for (int i = 0; i < e->value_count(); ++i) names.push_back(e->value(i)->name());
  return absl::StrJoin(names, ", ");
}

// What a value of `f` looks like, for error messages.
std::string Expected(const FieldDescriptor* f) {
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return "a 32-bit integer";
    case FieldDescriptor::CPPTYPE_INT64:
      return "a 64-bit integer";
    case FieldDescriptor::CPPTYPE_UINT32:
      return "an unsigned 32-bit integer";
    case FieldDescriptor::CPPTYPE_UINT64:
      return "an unsigned 64-bit integer";
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return "a finite real number";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true or false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return absl::StrCat("one of ", EnumNames(f->enum_type()));
    case FieldDescriptor::CPPTYPE_STRING:
      return "a string";
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return "a message";
  }
  return "a value";
}

template <typename T>
bool ParseInteger(absl::string_view text, T* out) {
  if (std::is_unsigned_v<T> && !text.empty() && text[0] == '-') return false;
  return absl::SimpleAtoi(text, out);
}

// Sets the scalar `f` of `m` (entry `index` when repeated) from `text`.
bool SetScalar(Message& m, const FieldDescriptor* f, int index, absl::string_view text) {
  const Reflection* r = m.GetReflection();
  const bool repeated = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v;
      if (!ParseInteger(text, &v)) return false;
      repeated ? r->SetRepeatedInt32(&m, f, index, v) : r->SetInt32(&m, f, v);
      return true;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t v;
      if (!ParseInteger(text, &v)) return false;
      repeated ? r->SetRepeatedInt64(&m, f, index, v) : r->SetInt64(&m, f, v);
      return true;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v;
      if (!ParseInteger(text, &v)) return false;
      repeated ? r->SetRepeatedUInt32(&m, f, index, v) : r->SetUInt32(&m, f, v);
      return true;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v;
      if (!ParseInteger(text, &v)) return false;
      repeated ? r->SetRepeatedUInt64(&m, f, index, v) : r->SetUInt64(&m, f, v);
      return true;
    }
    case FieldDescriptor::CPPTYPE_FLOAT: {
      float v;
      if (!absl::SimpleAtof(text, &v) || !std::isfinite(v)) return false;
      repeated ? r->SetRepeatedFloat(&m, f, index, v) : r->SetFloat(&m, f, v);
      return true;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double v;
      if (!absl::SimpleAtod(text, &v) || !std::isfinite(v)) return false;
      repeated ? r->SetRepeatedDouble(&m, f, index, v) : r->SetDouble(&m, f, v);
      return true;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      if (text != "true" && text != "false") return false;
      repeated ? r->SetRepeatedBool(&m, f, index, text == "true") : r->SetBool(&m, f, text == "true");
      return true;
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      const EnumValueDescriptor* v = f->enum_type()->FindValueByName(std::string(text));
      if (v == nullptr) return false;
      repeated ? r->SetRepeatedEnum(&m, f, index, v) : r->SetEnum(&m, f, v);
      return true;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      repeated ? r->SetRepeatedString(&m, f, index, std::string(text))
               : r->SetString(&m, f, std::string(text));
      return true;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return false;
  }
  return false;
}

absl::Status Invalid(absl::string_view assignment, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--set ", assignment, ": ", why));
}

absl::Status Apply(Message& root, absl::string_view assignment) {
  if (assignment.size() > kMaxOverrideBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--set: ", assignment.size(),
                                                   " bytes; at most ", kMaxOverrideBytes));
  }
  const size_t eq = assignment.find('=');
  if (eq == absl::string_view::npos || eq == 0) {
    return Invalid(assignment, "expected FIELD=VALUE (e.g. epochs=3, data.trainLimit=1000)");
  }
  const absl::string_view value = assignment.substr(eq + 1);
  const std::vector<absl::string_view> parts = absl::StrSplit(assignment.substr(0, eq), '.');
  Message* m = &root;
  std::string where;  // the path so far
  for (size_t i = 0; i < parts.size(); ++i) {
    const Descriptor* d = m->GetDescriptor();
    const Reflection* r = m->GetReflection();
    const FieldDescriptor* f = FindField(d, parts[i]);
    if (f == nullptr) return Invalid(assignment, UnknownField(d, where, parts[i]));
    const std::string path = where.empty() ? f->json_name() : absl::StrCat(where, ".", f->json_name());
    if (f->is_map()) return Invalid(assignment, absl::StrCat(path, " is a map; it cannot be set"));
    if (const auto* oneof = f->real_containing_oneof(); oneof != nullptr && r->HasOneof(*m, oneof)) {
      const FieldDescriptor* chosen = r->GetOneofFieldDescriptor(*m, oneof);
      if (chosen != f) {
        return Invalid(assignment,
                       absl::StrCat(where.empty() ? "the job" : where, " is a ",
                                    chosen->json_name(), ", not a ", f->json_name(),
                                    ": --set changes values, not what the file chose"));
      }
    }
    const bool last = i + 1 == parts.size();
    int index = -1;
    std::string at = path;
    if (f->is_repeated()) {
      if (last) {
        return Invalid(assignment, absl::StrCat(path, " is a list; name one entry (", path,
                                                ".0...)"));
      }
      const size_t size = static_cast<size_t>(r->FieldSize(*m, f));
      size_t wanted = 0;
      if (!absl::SimpleAtoi(parts[i + 1], &wanted) || wanted >= size) {
        return Invalid(assignment, absl::StrCat(path, " has ", size, " entries; \"",
                                                parts[i + 1], "\" is not one of 0..",
                                                size == 0 ? 0 : size - 1));
      }
      index = static_cast<int>(wanted);
      at = absl::StrCat(path, ".", wanted);
      ++i;
    }
    const bool at_end = i + 1 == parts.size();
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (at_end) {
        return Invalid(assignment, absl::StrCat(at, " is a message; set one of its fields: ",
                                                FieldNames(f->message_type())));
      }
      m = index >= 0 ? r->MutableRepeatedMessage(m, f, index) : r->MutableMessage(m, f);
      where = at;
      continue;
    }
    if (!at_end) {
      return Invalid(assignment, absl::StrCat(at, " is ", Expected(f), "; it has no fields"));
    }
    if (!SetScalar(*m, f, index, value)) {
      return Invalid(assignment, absl::StrCat(at, " is ", Expected(f), "; \"", value,
                                              "\" is not"));
    }
    return absl::OkStatus();
  }
  return Invalid(assignment, "expected FIELD=VALUE");
}

}  // namespace

absl::Status ApplyOverride(tagi::v1::JobSpec& spec, absl::string_view assignment) {
  tagi::v1::JobSpec copy = spec;
  TAGI_RETURN_IF_ERROR(Apply(copy, assignment));
  spec = std::move(copy);
  return absl::OkStatus();
}

absl::Status ApplyOverrides(tagi::v1::JobSpec& spec, const std::vector<std::string>& assignments) {
  if (assignments.size() > kMaxOverrides) {
    return absl::InvalidArgumentError(absl::StrCat(assignments.size(),
                                                   " --set overrides; at most ", kMaxOverrides));
  }
  tagi::v1::JobSpec copy = spec;
  for (const std::string& a : assignments) TAGI_RETURN_IF_ERROR(Apply(copy, a));
  spec = std::move(copy);
  return absl::OkStatus();
}

}  // namespace tagi
