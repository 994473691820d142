// tagictl: the command-line client of the coordinator.
//
//   tagictl --coord HOST:PORT submit JOB.json [--watch]
//   tagictl --coord HOST:PORT list | workers
//   tagictl --coord HOST:PORT status ID [--json]
//   tagictl --coord HOST:PORT watch ID
//   tagictl --coord HOST:PORT cancel ID
//   tagictl --coord HOST:PORT download ID -o FILE
// Security: --token-file F (API token), --tls-ca F [--tls-cert F --tls-key F].
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "common/grpc_util.h"
#include "common/job_spec.h"
#include "common/progress_bar.h"
#include "ctl/format.h"
#include "ctl/jobs_client.h"
#include "ctl/validate.h"
#include "ctl/watch_policy.h"

ABSL_FLAG(std::string, coord, "127.0.0.1:7070", "The coordinator's gRPC address, HOST:PORT.");
ABSL_FLAG(bool, watch, false, "submit: watch the job until it ends.");
ABSL_FLAG(bool, json, false, "status, validate: print JSON.");
ABSL_FLAG(std::string, o, "", "download: the file to write.");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "Deadline of each plain request.");
ABSL_FLAG(std::string, token_file, "",
          "File holding an API token (the coordinator's --api-tokens-file), sent as "
          "\"authorization: Bearer <token>\" on every call.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA that signed the coordinator's certificate: talk TLS. Empty: plaintext.");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate for mutual TLS (with --tls-key).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert.");
ABSL_FLAG(absl::Duration, watch_timeout, absl::Hours(24 * 7), "Give up watching after this long.");
ABSL_FLAG(absl::Duration, reconnect_for, absl::Seconds(60),
          "watch: keep reconnecting this long to a coordinator that stopped answering (a "
          "restarted coordinator resumes its jobs).");

namespace tagi {
namespace {

// The newest epoch in the job's history (it keeps only the newest ones).
uint64_t LastEpochOf(const tagi::v1::Job& j) {
  const auto& e = j.progress().epochs();
  return e.empty() ? 0 : e[e.size() - 1].epoch();
}

constexpr char kUsage[] =
    "the tagi-ddp command-line client.\n"
    "  tagictl --coord HOST:PORT submit JOB.json [--watch]\n"
    "  tagictl --coord HOST:PORT list | workers\n"
    "  tagictl --coord HOST:PORT status ID [--json]\n"
    "  tagictl --coord HOST:PORT watch ID [--reconnect-for 60s]\n"
    "  tagictl --coord HOST:PORT cancel ID\n"
    "  tagictl --coord HOST:PORT download ID -o FILE\n"
    "  tagictl validate JOB.json [--json]   (checks a job file here, as submit would)\n"
    "Security: --token-file F sends an API token; --tls-ca F talks TLS (--tls-cert F --tls-key F\n"
    "for mutual TLS).\n"
    "Exit codes: 0 success (watch: the job SUCCEEDED), 1 failure (watch: the job FAILED or was\n"
    "CANCELLED), 2 usage. Run with --helpfull for every flag.";

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "tagictl: %s\n",
               Printable(ExplainCallFailure(st, !absl::GetFlag(FLAGS_tls_ca).empty())).c_str());
  return 1;
}

int Usage(const std::string& why) {
  std::fprintf(stderr, "tagictl: %s\nusage: %s\n", why.c_str(), kUsage);
  return 2;
}

int Watch(JobsClient& client, const std::string& id) {
  const bool tty = ::isatty(STDERR_FILENO);
  RealClock clock;
  ProgressPrinter printer(stderr, clock, absl::Milliseconds(100));
  std::string last_line;
  uint64_t epochs_seen = 0;
  const absl::Time deadline = clock.Now() + absl::GetFlag(FLAGS_watch_timeout);
  const absl::Duration reconnect_for = absl::GetFlag(FLAGS_reconnect_for);
  // An outage of the coordinator: when it began and the retries since.
  std::optional<absl::Time> outage;
  int attempt = 0;
  for (;;) {
    auto job = client.Watch(id, deadline - clock.Now(), [&](const tagi::v1::Job& j) {
      if (outage) {
        std::fprintf(stderr, "%stagictl: reconnected to the coordinator after %s\n",
                     tty ? "\n" : "",
                     absl::FormatDuration(absl::Trunc(clock.Now() - *outage,
                                                      absl::Milliseconds(1))).c_str());
        outage.reset();
        attempt = 0;
      }
      const std::string line = WatchLine(j);
      if (tty) {
        printer.Update(line);
      } else if (LastEpochOf(j) != epochs_seen ||
                 j.state() != tagi::v1::RUNNING) {
        if (line != last_line) std::fprintf(stderr, "%s\n", line.c_str());
        last_line = line;
      }
      epochs_seen = LastEpochOf(j);
    });
    const bool ended = job.ok() && (job->state() == tagi::v1::SUCCEEDED ||
                                    job->state() == tagi::v1::FAILED ||
                                    job->state() == tagi::v1::CANCELLED);
    if (ended) {
      if (tty) {
        printer.Update(WatchLine(*job), true);
        printer.Finish();
      }
      std::printf("%s %s: %s\n", Printable(job->id()).c_str(),
                  tagi::v1::JobState_Name(job->state()).c_str(), Printable(job->reason()).c_str());
      const std::string metric = LatestMetric(*job);
      if (!metric.empty()) std::printf("final %s\n", metric.c_str());
      return job->state() == tagi::v1::SUCCEEDED ? 0 : 1;
    }
    const absl::Time now = clock.Now();
    const absl::Status why = job.ok() ? absl::OkStatus() : job.status();
    if (!outage && (why.ok() || absl::IsUnavailable(why))) {
      outage = now;
      std::fprintf(stderr, "%stagictl: lost the coordinator (%s); reconnecting for up to %s\n",
                   tty ? "\n" : "",
                   why.ok() ? "the watch ended before the job" : std::string(why.message()).c_str(),
                   absl::FormatDuration(reconnect_for).c_str());
    }
    const WatchRetry retry =
        DecideWatchRetry(why, outage.value_or(now), now, deadline, reconnect_for, attempt,
                         static_cast<uint64_t>(absl::ToUnixNanos(now)));
    if (!retry.retry) {
      if (!why.ok() && !absl::IsUnavailable(why)) return Fail(why);
      std::fprintf(stderr, "tagictl: %s\n", retry.why.c_str());
      return 1;
    }
    absl::SleepFor(retry.delay);
    ++attempt;
  }
}

int Submit(JobsClient& client, const std::string& path) {
  auto spec = LoadJobSpecFile(path);
  if (!spec.ok()) return Fail(spec.status());
  auto job = client.Submit(*spec);
  if (!job.ok()) return Fail(job.status());
  std::printf("%s\n", Printable(job->id()).c_str());
  std::fflush(stdout);
  return absl::GetFlag(FLAGS_watch) ? Watch(client, job->id()) : 0;
}

int Status(JobsClient& client, const std::string& id) {
  auto job = client.Get(id);
  if (!job.ok()) return Fail(job.status());
  if (absl::GetFlag(FLAGS_json)) {
    std::string out;
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    (void)google::protobuf::util::MessageToJsonString(*job, &out, options);
    std::printf("%s", out.c_str());
  } else {
    std::printf("%s", JobDetails(*job).c_str());
  }
  return 0;
}

int Download(JobsClient& client, const std::string& id) {
  const std::string out = absl::GetFlag(FLAGS_o);
  if (out.empty()) return Usage("download needs -o FILE");
  auto bytes = client.DownloadModel(id, absl::Minutes(10));
  if (!bytes.ok()) return Fail(bytes.status());
  if (auto st = WriteFileAtomic(out, *bytes); !st.ok()) return Fail(st);
  std::printf("%s: %zu bytes\n", out.c_str(), bytes->size());
  return 0;
}

int Run(const std::vector<std::string>& args) {
  if (args.empty()) return Usage("no command given");
  const std::string& cmd = args[0];
  if (cmd == "validate") {  // local: no coordinator
    if (args.size() != 2) return Usage("validate needs one job file");
    const Validation v = ValidateJobFile(args[1]);
    std::printf("%s", (absl::GetFlag(FLAGS_json) ? v.json : v.text).c_str());
    return v.valid ? 0 : 1;
  }
  const std::string coord = absl::GetFlag(FLAGS_coord);
  if (!ValidHostPort(coord)) return Usage(absl::StrFormat("--coord \"%s\" is not HOST:PORT", coord));
  ClientSecurity security;
  if (auto st = LoadClientTls(absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
                              absl::GetFlag(FLAGS_tls_key), security);
      !st.ok()) {
    return Usage(std::string(st.message()));
  }
  if (const std::string f = absl::GetFlag(FLAGS_token_file); !f.empty()) {
    auto tokens = ReadTokenFile(f, "--token-file");
    if (!tokens.ok()) return Usage(std::string(tokens.status().message()));
    if (tokens->size() != 1) {
      return Usage(absl::StrFormat("--token-file %s holds %d tokens; expected exactly one", f,
                                   tokens->size()));
    }
    security.metadata_key = kAuthorizationMetadataKey;
    security.metadata_value = "Bearer " + (*tokens)[0];
  }
  JobsClient client(coord, absl::GetFlag(FLAGS_timeout), security);
  const bool one_arg = args.size() == 2;
  if (cmd == "list" && args.size() == 1) {
    auto jobs = client.List();
    if (!jobs.ok()) return Fail(jobs.status());
    std::printf("%s", JobTable(*jobs).c_str());
    return 0;
  }
  if (cmd == "workers" && args.size() == 1) {
    auto workers = client.ListWorkers();
    if (!workers.ok()) return Fail(workers.status());
    std::printf("%s", WorkerTable(*workers).c_str());
    return 0;
  }
  if (cmd == "submit" && one_arg) return Submit(client, args[1]);
  if (cmd == "status" && one_arg) return Status(client, args[1]);
  if (cmd == "watch" && one_arg) return Watch(client, args[1]);
  if (cmd == "download" && one_arg) return Download(client, args[1]);
  if (cmd == "cancel" && one_arg) {
    auto job = client.Cancel(args[1]);
    if (!job.ok()) return Fail(job.status());
    std::printf("%s %s: %s\n", Printable(job->id()).c_str(),
                tagi::v1::JobState_Name(job->state()).c_str(), Printable(job->reason()).c_str());
    return 0;
  }
  return Usage(absl::StrFormat("unknown command or wrong arguments: \"%s\"", cmd));
}

}  // namespace
}  // namespace tagi

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(tagi::kUsage);
  std::vector<char*> raw = tagi::ParseFlags(argc, argv);
  std::vector<std::string> args(raw.begin() + 1, raw.end());
  return tagi::Run(args);
}
