// The web UI in a real browser: headless Chromium (Debian's chromium) loads
// the coordinator's pages while a real worker runs a job, and the DOM it
// renders is checked: the jobs and workers, a job's state, curves, epochs,
// worlds and log; a coordinator that requires an API token shows that it
// does and serves no data without one. Skips (saying so) without chromium.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/rest/rest_fixture.h"
#include "tests/testing/child_process.h"

namespace tagi::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using tagi::v1::Job;

std::string Chromium() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return "";
}

class WebUi : public RestTest {
 protected:
  void SetUp() override {
    chromium_ = Chromium();
    if (chromium_.empty()) GTEST_SKIP() << "no chromium (Debian's chromium package) to load pages";
  }

  // The DOM of `path` once its script has run (and its requests answered).
  std::string Dom(const std::string& path) {
    const ProcessResult r = RunProcess(
        {chromium_, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--user-data-dir=" + dir_.File("chromium"), "--virtual-time-budget=5000",
         "--dump-dom", base_url() + path},
        absl::Seconds(90));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }
  // Writes a screenshot of `path` into the test's directory (for a look).
  void Screenshot(const std::string& path, const std::string& file) {
    (void)RunProcess({chromium_, "--headless=new", "--no-sandbox", "--disable-gpu",
                      "--no-first-run", "--user-data-dir=" + dir_.File("chromium"),
                      "--hide-scrollbars", "--window-size=1280,1400",
                      "--virtual-time-budget=5000", "--screenshot=" + dir_.File(file),
                      base_url() + path},
                     absl::Seconds(90));
  }

  std::string chromium_;
};

TEST_F(WebUi, ShowsTheJobsTheWorkersAndAJobsCurvesWorldsAndLog) {
  Job finished;
  ASSERT_NO_FATAL_FAILURE(RunToyJobToSuccess("shown", 3, &finished));
  const Job* done = &finished;
  const std::string id = finished.id();
  ASSERT_TRUE(WaitUntil([&] { return Get("/v1/jobs/" + id + "/logs").body.find("finished") !=
                                     std::string::npos; },
                        absl::Seconds(20)));

  const std::string jobs = Dom("/ui");
  EXPECT_THAT(jobs, HasSubstr(absl::StrCat("<tr data-job=\"", id, "\">")));
  EXPECT_THAT(jobs, HasSubstr("<td>shown</td>"));
  EXPECT_THAT(jobs, HasSubstr("class=\"state SUCCEEDED\">SUCCEEDED</td>"));
  EXPECT_THAT(jobs, HasSubstr(absl::StrCat("<tr data-worker=\"", done->workers(0), "\">")));
  EXPECT_THAT(jobs, HasSubstr("<td>IDLE</td>"));
  EXPECT_THAT(jobs, HasSubstr("class=\"\">updated "));  // the status line: no error

  const std::string job = Dom("/ui#/job/" + id);
  EXPECT_THAT(job, HasSubstr("<span id=\"job-state\" class=\"state SUCCEEDED\">SUCCEEDED</span>"));
  EXPECT_THAT(job, HasSubstr("trained 3 epochs on 1 worker"));
  const uint64_t steps = done->progress().total_steps();
  EXPECT_THAT(job, HasSubstr(absl::StrCat("step ", steps, "/", steps)));
  for (const char* chart : {"chart-metric", "chart-loglik", "chart-rate"}) {
    const size_t at = job.find(absl::StrCat("id=\"", chart, "\""));
    ASSERT_NE(at, std::string::npos) << chart;
    EXPECT_NE(job.find("<polyline points=", at), std::string::npos) << chart;
  }
  EXPECT_THAT(job, HasSubstr("<b>test RMSE</b>"));  // a regression job's metric
  EXPECT_THAT(job, HasSubstr("<tr><td>3</td>"));     // the third epoch's row
  EXPECT_THAT(job, HasSubstr("<table id=\"worlds\">"));
  EXPECT_THAT(job, HasSubstr("rank 0 of 1 on worker"));
  EXPECT_THAT(job, HasSubstr(absl::StrCat("gen 1 ", done->workers(0), ": finished")));
  Screenshot("/ui#/job/" + id, "job.png");
  EXPECT_GT(std::filesystem::file_size(dir_.File("job.png")), 10'000u);
}

TEST_F(WebUi, WithoutTheRequiredTokenItSaysSoAndGetsNoData) {
  const std::string tokens = dir_.File("api.tokens");
  {
    std::ofstream out(tokens);
    out << "s3cret-token-for-the-ui\n";
  }
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1, {"--api-tokens-file", tokens}));
  // The page and its files carry no data and need no token...
  const HttpReply page = Get("/ui");
  ASSERT_EQ(page.status, 200);
  EXPECT_THAT(page.Header("Content-Type"), HasSubstr("text/html"));
  EXPECT_THAT(page.Header("Content-Security-Policy"), HasSubstr("default-src 'none'"));
  EXPECT_EQ(Get("/ui/app.js").status, 200);
  EXPECT_EQ(Get("/ui/app.css").status, 200);
  // ...the data does.
  EXPECT_EQ(Get("/v1/jobs").status, 401);
  const std::string dom = Dom("/ui");
  EXPECT_THAT(dom, HasSubstr("<p id=\"auth-needed\">This coordinator requires an API token"));
  EXPECT_THAT(dom, HasSubstr("class=\"error\">UNAUTHENTICATED: this coordinator requires an API "
                             "token"));
  EXPECT_THAT(dom, Not(HasSubstr("<table")));
}

}  // namespace
}  // namespace tagi::testing
