// The curl examples of docs/api.md's "### The REST API" section work as
// printed: every command of its ```sh blocks that starts with `curl` runs, in
// order, against a live coordinator with one worker (the section's setup),
// with http://localhost:8080 replaced by the live address, in a directory
// where examples/ is the repository's. `curl -sf` makes a non-2xx reply a
// non-zero exit.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/rest/rest_fixture.h"

namespace tagi::testing {
namespace {

constexpr char kSection[] = "### The REST API";
constexpr char kPlaceholder[] = "http://localhost:8080";

// True when the shell text ends inside a quote or with a backslash-newline
// continuation: the command goes on on the next line.
bool Incomplete(const std::string& text) {
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote == '\'') {
      if (c == '\'') quote = 0;
    } else if (c == '\\') {
      if (i + 1 == text.size()) return true;
      ++i;
    } else if (quote == '"') {
      if (c == '"') quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    }
  }
  return quote != 0;
}

// The `curl` commands of the section's ```sh blocks, in order; a command
// may span lines (inside quotes, or after a trailing backslash).
std::vector<std::string> CurlCommands(const std::string& readme) {
  std::vector<std::string> commands;
  bool in_section = false;
  bool in_fence = false;
  bool in_sh = false;
  std::string pending;  // a curl command that goes on
  for (absl::string_view raw : absl::StrSplit(readme, '\n')) {
    const std::string line(absl::StripTrailingAsciiWhitespace(raw));
    if (!pending.empty()) {
      pending += "\n" + line;
      if (!Incomplete(pending)) {
        commands.push_back(pending);
        pending.clear();
      }
      continue;
    }
    if (absl::StartsWith(line, "```")) {
      in_fence = !in_fence;
      in_sh = in_fence && line == "```sh";
      continue;
    }
    if (!in_fence && absl::StartsWith(line, "#")) {
      if (in_section) break;  // the next heading
      in_section = line == kSection;
      continue;
    }
    const std::string code(absl::StripLeadingAsciiWhitespace(line));
    if (!in_section || !in_sh || !absl::StartsWith(code, "curl ")) continue;
    if (Incomplete(code)) {
      pending = code;
    } else {
      commands.push_back(code);
    }
  }
  return commands;
}

TEST(ReadmeCurlCommands, AreFoundInTheRestSectionOnly) {
  const std::vector<std::string> commands = CurlCommands(
      "# T\n### The REST API\ntext\n```sh\ncurl -sf a\n# comment\n  curl -sf b \\\n  -d x\n"
      "ls\ncurl -d '{\n \"a\": 1}' c\n```\n```json\ncurl no\n```\n### Next\n```sh\ncurl -sf "
      "d\n```\n");
  EXPECT_THAT(commands, ::testing::ElementsAre("curl -sf a", "curl -sf b \\\n  -d x",
                                               "curl -d '{\n \"a\": 1}' c"));
}

using ReadmeCurl = RestTest;

TEST_F(ReadmeCurl, ExamplesWorkAsPrinted) {
  if (!std::filesystem::exists("/usr/bin/curl")) GTEST_SKIP() << "/usr/bin/curl is not installed";
  const std::vector<std::string> lines = CurlCommands(ReadSourceFile("docs/api.md"));
  ASSERT_GE(lines.size(), 10u) << "too few curl commands under \"" << kSection
                                << "\" in docs/api.md";

  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  StartWorker();
  ASSERT_TRUE(WaitForIdleWorkers(1, absl::Seconds(20)));
  const std::string cwd = dir_.File("readme");
  std::filesystem::create_directories(cwd);
  std::filesystem::create_directory_symlink(SourcePath("examples"), cwd + "/examples");

  for (const std::string& line : lines) {
    SCOPED_TRACE(line);
    EXPECT_TRUE(absl::StrContains(line, kPlaceholder))
        << "every example should address " << kPlaceholder;
    EXPECT_TRUE(absl::StrContains(line, " -sf ")) << "every example should use curl -sf";
    const std::string command = absl::StrReplaceAll(line, {{kPlaceholder, base_url()}});
    // A line may need the job to get somewhere first (the model download
    // waits for it to succeed): retry a failing line for a while.
    ProcessResult r;
    const bool ok = WaitUntil(
        [&] {
          r = RunProcess({"/bin/sh", "-c", "cd '" + cwd + "' && " + command}, absl::Seconds(30));
          return r.exit_code == 0;
        },
        absl::Seconds(90), absl::Milliseconds(500));
    EXPECT_TRUE(ok) << "exit " << r.exit_code << "\nstdout: " << r.out << "\nstderr: " << r.err
                    << "\nthe jobs: " << Get("/v1/jobs").body.substr(0, 3000);
  }
  // The model download wrote a file.
  int models = 0;
  for (const auto& entry : std::filesystem::directory_iterator(cwd)) {
    if (entry.path().extension() != ".tagi") continue;
    ++models;
    EXPECT_GT(std::filesystem::file_size(entry.path()), 0u) << entry.path();
  }
  EXPECT_EQ(models, 1) << "expected one downloaded model file (*.tagi) in " << cwd;
  ExpectServing();
}

}  // namespace
}  // namespace tagi::testing
