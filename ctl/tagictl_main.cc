// tagictl: the command-line client of the coordinator.
//
//   tagictl --coord HOST:PORT submit JOB.json [--set FIELD=VALUE ...] [--watch]
//   tagictl --coord HOST:PORT list | workers
//   tagictl --coord HOST:PORT status ID [--json]
//   tagictl --coord HOST:PORT watch ID
//   tagictl --coord HOST:PORT logs ID [--follow]
//   tagictl --coord HOST:PORT cancel ID
//   tagictl --coord HOST:PORT download ID -o FILE [--snapshot]
// Security: --token-file F (API token), --tls-ca F [--tls-cert F --tls-key F].
#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "common/grpc_util.h"
#include "common/job_overrides.h"
#include "common/job_spec.h"
#include "ctl/format.h"
#include "ctl/jobs_client.h"
#include "ctl/validate.h"
#include "ctl/watch.h"

ABSL_FLAG(std::string, coord, "127.0.0.1:7070", "The coordinator's gRPC address, HOST:PORT.");
ABSL_FLAG(bool, watch, false, "submit: watch the job until it ends.");
ABSL_FLAG(bool, json, false, "status, validate: print JSON.");
ABSL_FLAG(bool, follow, false, "logs: keep printing new lines until the job ends.");
ABSL_FLAG(uint64_t, after, 0, "logs: only the lines after this seq.");
ABSL_FLAG(std::string, o, "", "download: the file to write.");
ABSL_FLAG(bool, snapshot, false,
          "download: the job's newest stored snapshot as a model file (what a CANCELLED or "
          "FAILED job got to) instead of its final model.");
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

constexpr char kUsage[] =
    "the tagi-ddp command-line client.\n"
    "  tagictl --coord HOST:PORT submit JOB.json [--set FIELD=VALUE ...] [--watch]\n"
    "    (--set: a job file field by its path, e.g. epochs=2, data.trainLimit=1000,\n"
    "    layers.0.linear.outFeatures=64; repeat it for more)\n"
    "  tagictl --coord HOST:PORT list | workers\n"
    "  tagictl --coord HOST:PORT status ID [--json]\n"
    "  tagictl --coord HOST:PORT watch ID [--reconnect-for 60s]\n"
    "  tagictl --coord HOST:PORT logs ID [--follow] [--after SEQ]\n"
    "  tagictl --coord HOST:PORT cancel ID\n"
    "  tagictl --coord HOST:PORT download ID -o FILE [--snapshot]\n"
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
  WatchOptions options;
  options.timeout = absl::GetFlag(FLAGS_watch_timeout);
  options.reconnect_for = absl::GetFlag(FLAGS_reconnect_for);
  auto job = WatchJob(client, id, options);
  if (!job.ok()) {
    if (!absl::IsUnavailable(job.status())) return Fail(job.status());
    std::fprintf(stderr, "tagictl: %s\n", std::string(job.status().message()).c_str());
    return 1;
  }
  return job->state() == tagi::v1::SUCCEEDED ? 0 : 1;
}

// `sets`: the --set FIELD=VALUE overrides (common/job_overrides.h).
int Submit(JobsClient& client, const std::string& path, const std::vector<std::string>& sets) {
  auto spec = LoadJobSpecFile(path);
  if (!spec.ok()) return Fail(spec.status());
  if (!sets.empty()) {
    if (auto st = ApplyOverrides(*spec, sets); !st.ok()) return Usage(std::string(st.message()));
    // What the coordinator would refuse, said here with the overrides named.
    if (auto st = ValidateJobSpec(*spec); !st.ok()) {
      std::fprintf(stderr, "tagictl: %s with --set %s: %s\n", path.c_str(),
                   absl::StrJoin(sets, " --set ").c_str(), Printable(st.message()).c_str());
      return 1;
    }
  }
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

// How often `logs --follow` asks for new lines.
constexpr absl::Duration kFollowEvery = absl::Milliseconds(500);
constexpr absl::Duration kLastLinesGrace = absl::Seconds(1);

int Logs(JobsClient& client, const std::string& id) {
  const bool follow = absl::GetFlag(FLAGS_follow);
  uint64_t after = absl::GetFlag(FLAGS_after);
  uint64_t dropped = 0;
  int final_seen = 0;
  for (;;) {
    auto logs = client.GetLogs(id, after);
    if (!logs.ok()) return Fail(logs.status());
    if (logs->dropped() > dropped) {
      if (after > 0 || dropped > 0) {
        std::fprintf(stderr, "tagictl: %llu older lines were dropped (the log keeps the newest)\n",
                     static_cast<unsigned long long>(logs->dropped() - dropped));
      }
      dropped = logs->dropped();
    }
    for (const auto& line : logs->lines()) std::printf("%s\n", LogLineText(line).c_str());
    std::fflush(stdout);
    after = logs->next();
    if (logs->lines_size() > 0) continue;  // more may wait
    if (!follow) return 0;
    // The ranks' last lines (how their attempt ended) arrive just after
    // the job ends: one more look, a moment later.
    if (IsFinal(logs->state()) && final_seen++ > 0) return 0;
    absl::SleepFor(IsFinal(logs->state()) ? kLastLinesGrace : kFollowEvery);
  }
}

int Download(JobsClient& client, const std::string& id) {
  const std::string out = absl::GetFlag(FLAGS_o);
  if (out.empty()) return Usage("download needs -o FILE");
  auto bytes = client.DownloadModel(id, absl::Minutes(10), absl::GetFlag(FLAGS_snapshot));
  if (!bytes.ok()) return Fail(bytes.status());
  if (auto st = WriteFileAtomic(out, *bytes); !st.ok()) return Fail(st);
  std::printf("%s: %zu bytes\n", out.c_str(), bytes->size());
  return 0;
}

int Run(const std::vector<std::string>& args, const std::vector<std::string>& sets) {
  if (args.empty()) return Usage("no command given");
  const std::string& cmd = args[0];
  if (!sets.empty() && cmd != "submit") return Usage("--set goes with submit");
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
  if (cmd == "submit" && one_arg) return Submit(client, args[1], sets);
  if (cmd == "status" && one_arg) return Status(client, args[1]);
  if (cmd == "watch" && one_arg) return Watch(client, args[1]);
  if (cmd == "download" && one_arg) return Download(client, args[1]);
  if (cmd == "logs" && one_arg) return Logs(client, args[1]);
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
  auto sets = tagi::TakeRepeatedFlag(argc, argv, "set");
  if (!sets.ok()) return tagi::Usage(std::string(sets.status().message()));
  std::vector<char*> raw = tagi::ParseFlags(argc, argv);
  std::vector<std::string> args(raw.begin() + 1, raw.end());
  return tagi::Run(args, *sets);
}
