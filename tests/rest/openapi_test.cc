// docs/openapi.yaml and the server in step: every documented operation is
// served and nothing else is (against the gateway's route table and the
// live server), every other method on a documented path is 405, the
// schemas name exactly the fields of the protobuf messages, and, where
// schemathesis is installed, generated requests find no response that the
// document does not describe.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "coordinator/rest_gateway.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tagi/v1/jobs.pb.h"
#include "tests/rest/rest_fixture.h"

namespace tagi::testing {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Struct;
using google::protobuf::Value;

using Operation = std::pair<std::string, std::string>;  // (path, METHOD)

const std::set<std::string> kHttpMethods = {"get",     "put",  "post",  "delete",
                                            "options", "head", "patch", "trace"};

// The operations under `paths:`, read line by line: a path is a key indented
// by two spaces, a method a key indented by four. Needs no YAML library.
std::set<Operation> ScanOperations(const std::string& yaml) {
  std::set<Operation> ops;
  bool in_paths = false;
  std::string path;
  for (absl::string_view line : absl::StrSplit(yaml, '\n')) {
    if (!line.empty() && line[0] != ' ' && line[0] != '#') {
      in_paths = line == "paths:";
      continue;
    }
    if (!in_paths || !absl::EndsWith(line, ":")) continue;
    const std::string key(line.substr(0, line.size() - 1));
    if (absl::StartsWith(key, "  /")) {
      path = key.substr(2);
    } else if (absl::StartsWith(key, "    ") && key[4] != ' ' &&
               kHttpMethods.contains(key.substr(4))) {
      ops.insert({path, absl::AsciiStrToUpper(key.substr(4))});
    }
  }
  return ops;
}

std::set<Operation> Documented() {
  const std::string yaml = ReadSourceFile("docs/openapi.yaml");
  EXPECT_FALSE(yaml.empty()) << "cannot read docs/openapi.yaml";
  return ScanOperations(yaml);
}

std::string Concrete(const std::string& path, const std::string& id) {
  return absl::StrReplaceAll(path, {{"{id}", id}});
}

std::string Describe(const std::set<Operation>& ops) {
  std::vector<std::string> out;
  for (const auto& [path, method] : ops) out.push_back(method + " " + path);
  return absl::StrJoin(out, ", ");
}

TEST(OpenApiDocument, ListsExactlyTheGatewaysRoutes) {
  const std::set<Operation> documented = Documented();
  ASSERT_GE(documented.size(), 9u)
      << "the scanner found too few operations: " << Describe(documented);
  std::set<Operation> served;
  for (const auto& route : coordinator::RestGateway::Routes()) {
    served.insert({route.path, route.method});
  }
  std::set<Operation> undocumented, unserved;
  for (const Operation& op : served) {
    if (!documented.contains(op)) undocumented.insert(op);
  }
  for (const Operation& op : documented) {
    if (!served.contains(op)) unserved.insert(op);
  }
  EXPECT_TRUE(undocumented.empty())
      << "served but not in docs/openapi.yaml: " << Describe(undocumented);
  EXPECT_TRUE(unserved.empty()) << "in docs/openapi.yaml but not served: " << Describe(unserved);
}

using OpenApiServer = RestTest;

TEST_F(OpenApiServer, ServesEveryDocumentedOperation) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  ASSERT_EQ(Post("/v1/jobs", ToyJobJson()).status, 201);
  for (const auto& [path, method] : Documented()) {
    SCOPED_TRACE(method + " " + path);
    const HttpReply reply = Request(method, Concrete(path, "job-1"),
                                    method == "POST" && path == "/v1/jobs" ? ToyJobJson() : "");
    // 409: the model of a job that has not run; anything else is 2xx.
    EXPECT_TRUE((reply.status >= 200 && reply.status < 300) || reply.status == 409)
        << reply.status << " " << reply.body;
  }
}

TEST_F(OpenApiServer, AnswersOtherMethodsOnDocumentedPathsWith405) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  std::map<std::string, std::set<std::string>> allowed;
  for (const auto& [path, method] : Documented()) {
    allowed[path].insert(method);
    if (method == "GET") allowed[path].insert("HEAD");
  }
  for (const auto& [path, methods] : allowed) {
    for (const std::string method : {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}) {
      if (methods.contains(method)) continue;
      SCOPED_TRACE(method + " " + path);
      const HttpReply reply = Request(method, Concrete(path, "job-1"));
      EXPECT_EQ(reply.status, 405) << reply.body;
      EXPECT_EQ(reply.Header("Allow"), absl::StrJoin(methods, ", "));
    }
  }
}

// ---- Schemas against the protobuf descriptors (needs python3 and PyYAML).

class SchemaChecker {
 public:
  explicit SchemaChecker(const Struct& schemas) : schemas_(schemas) {}

  // Compares a message with its schema (by reference or inline), then every
  // message-typed field with the schema of its property.
  void Check(const Descriptor* message, const Value& schema, const std::string& where) {
    const Struct& s = Resolve(schema);
    // A referenced schema is checked once per message (Layer nests Layer
    // through residual blocks); an inline one once per place.
    const std::string ref = RefName(schema);
    if (!checked_.insert(message->full_name() + "@" + (ref.empty() ? where : "#" + ref)).second) {
      return;
    }
    EXPECT_TRUE(s.fields().contains("additionalProperties") &&
                !s.fields().at("additionalProperties").bool_value())
        << where << ": set additionalProperties: false, so that responses with fields the "
        << "document does not name fail the schemathesis check";
    std::set<std::string> documented, fields;
    const Struct* props = nullptr;
    if (s.fields().contains("properties")) {
      props = &s.fields().at("properties").struct_value();
      for (const auto& [name, unused] : props->fields()) documented.insert(name);
    }
    for (int i = 0; i < message->field_count(); ++i) fields.insert(message->field(i)->json_name());
    EXPECT_EQ(documented, fields) << where << " vs " << message->full_name();
    if (props == nullptr) return;
    for (int i = 0; i < message->field_count(); ++i) {
      const FieldDescriptor* f = message->field(i);
      if (!props->fields().contains(f->json_name())) continue;
      CheckField(f, props->fields().at(f->json_name()), where + "." + f->json_name());
    }
  }

 private:
  const Struct& Resolve(const Value& schema) {
    const Struct& s = schema.struct_value();
    if (!s.fields().contains("$ref")) return s;
    const std::string ref = s.fields().at("$ref").string_value();
    const std::string name(absl::StripPrefix(ref, "#/components/schemas/"));
    EXPECT_TRUE(schemas_.fields().contains(name)) << "dangling $ref " << ref;
    static const Value kEmpty;
    return schemas_.fields().contains(name) ? schemas_.fields().at(name).struct_value()
                                            : kEmpty.struct_value();
  }

  std::string RefName(const Value& schema) {
    const auto& f = schema.struct_value().fields();
    return f.contains("$ref") ? std::string(absl::StripPrefix(f.at("$ref").string_value(),
                                                              "#/components/schemas/"))
                              : "";
  }

  std::string Type(const Value& schema) {
    const auto& f = Resolve(schema).fields();
    return f.contains("type") ? f.at("type").string_value() : "";
  }

  void CheckField(const FieldDescriptor* f, const Value& schema, const std::string& where) {
    if (f->is_repeated()) {
      ASSERT_EQ(Type(schema), "array") << where;
      const auto& s = Resolve(schema).fields();
      ASSERT_TRUE(s.contains("items")) << where;
      return CheckSingle(f, s.at("items"), where + "[]");
    }
    CheckSingle(f, schema, where);
  }

  void CheckSingle(const FieldDescriptor* f, const Value& schema, const std::string& where) {
    using FD = FieldDescriptor;
    switch (f->cpp_type()) {
      case FD::CPPTYPE_MESSAGE:
        return Check(f->message_type(), schema, where);
      case FD::CPPTYPE_ENUM: {
        std::vector<std::string> names, listed;
        for (int i = 0; i < f->enum_type()->value_count(); ++i) {
          names.push_back(f->enum_type()->value(i)->name());
        }
        const auto& s = Resolve(schema).fields();
        if (s.contains("enum")) {
          for (const Value& v : s.at("enum").list_value().values()) {
            listed.push_back(v.string_value());
          }
        }
        EXPECT_EQ(listed, names) << where;
        return;
      }
      case FD::CPPTYPE_STRING:
        EXPECT_EQ(Type(schema), "string") << where;
        return;
      case FD::CPPTYPE_BOOL:
        EXPECT_EQ(Type(schema), "boolean") << where;
        return;
      case FD::CPPTYPE_INT64:
      case FD::CPPTYPE_UINT64:
        EXPECT_EQ(RefName(schema), "Int64String") << where << ": 64-bit integers print as strings";
        return;
      case FD::CPPTYPE_FLOAT:
      case FD::CPPTYPE_DOUBLE:
        EXPECT_EQ(RefName(schema), "Double") << where;
        return;
      case FD::CPPTYPE_UINT32:
        EXPECT_EQ(RefName(schema), "UInt32") << where;
        return;
      default:
        EXPECT_EQ(Type(schema), "integer") << where;
    }
  }

  const Struct& schemas_;
  std::set<std::string> checked_;
};

// docs/openapi.yaml as JSON, via python3 and PyYAML; "" (with the reason in
// `why`) when they are missing.
std::string OpenApiAsJson(std::string& why) {
  const ProcessResult r = RunProcess(
      {"/usr/bin/env", "python3", "-c",
       "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)",
       SourcePath("docs/openapi.yaml")},
      absl::Seconds(60));
  if (r.exit_code == 0) return r.out;
  why = r.exit_code == 127 ? "python3 is not installed"
        : absl::StrContains(r.err, "No module named 'yaml'")
            ? "PyYAML is not installed (Debian: python3-yaml)"
            : "";
  EXPECT_FALSE(why.empty()) << "python3 failed on docs/openapi.yaml: " << r.err;
  return "";
}

TEST(OpenApiDocument, SchemasNameExactlyTheProtobufFields) {
  std::string why;
  const std::string json = OpenApiAsJson(why);
  if (json.empty()) GTEST_SKIP() << why;
  Struct doc;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &doc).ok());

  // The YAML parser agrees with the line scanner the other tests use.
  std::set<Operation> parsed;
  for (const auto& [path, item] : doc.fields().at("paths").struct_value().fields()) {
    for (const auto& [method, unused] : item.struct_value().fields()) {
      if (kHttpMethods.contains(method)) parsed.insert({path, absl::AsciiStrToUpper(method)});
    }
  }
  EXPECT_EQ(parsed, Documented());

  const Struct& schemas =
      doc.fields().at("components").struct_value().fields().at("schemas").struct_value();
  SchemaChecker checker(schemas);
  for (const Descriptor* message :
       {tagi::v1::Job::descriptor(), tagi::v1::JobSpec::descriptor(),
        tagi::v1::SubmitJobRequest::descriptor(), tagi::v1::ListJobsResponse::descriptor(),
        tagi::v1::ListWorkersResponse::descriptor()}) {
    SCOPED_TRACE(message->full_name());
    ASSERT_TRUE(schemas.fields().contains(message->name()));
    checker.Check(message, schemas.fields().at(message->name()), message->name());
  }
}

// ---- schemathesis (from PyPI), when installed.

TEST_F(OpenApiServer, SchemathesisFindsNoUndocumentedResponse) {
  const ProcessResult which =
      RunProcess({"/bin/sh", "-c", "command -v schemathesis"}, absl::Seconds(10));
  if (which.exit_code != 0) {
    GTEST_SKIP() << "schemathesis is not installed (pip install schemathesis)";
  }
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  // Not positive_data_acceptance / negative_data_rejection: the server
  // validates jobs beyond what a schema can say, and accepts the proto3 JSON
  // mapping's other spellings (snake_case, numbers as strings).
  const ProcessResult r =
      RunProcess({std::string(absl::StripAsciiWhitespace(which.out)), "run",
                  SourcePath("docs/openapi.yaml"), "--url", base_url(), "--checks",
                  "not_a_server_error,status_code_conformance,content_type_conformance,"
                  "response_headers_conformance,response_schema_conformance,unsupported_method,"
                  "allow_header_conformance,use_after_free,ensure_resource_availability",
                  "--max-examples", "40", "--workers", "1", "--seed", "1", "--no-color",
                  "--generation-database", "none", "--request-timeout", "20"},
                 absl::Seconds(240));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  ExpectServing();
}

}  // namespace
}  // namespace tagi::testing
