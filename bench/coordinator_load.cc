// coordinator_load: one process simulating many workers against a real
// tagi-coordinator, speaking the real worker protocol (issue 16's figures).
//
// Each simulated worker registers, keeps a session stream open with a
// heartbeat every heartbeat interval, long-polls Rendezvous while idle,
// and, when assigned, runs the store traffic of a ring bootstrap (rank 0
// sets ring/group; every rank sets ring/addr/<rank>, reads ring/group and
// its successor's address) and of the replica check (replica/<rank>, rank
// 0's read), then heartbeats with its attempt. On ABORT it reports
// FinishJob (retryable) and polls again, as tagi-worker does. It trains
// nothing and opens no collective sockets: what it loads is the
// coordinator.
//
// The coordinator is started by the tool (build/bin/tagi-coordinator, or
// --coordinator BIN) pinned to CPU 0, the tool itself to CPU 1 when there
// is one. For each worker count it measures:
//   register all      first Register sent -> every worker registered
//   threads, CPU, RSS  of the coordinator while every worker idles
//                      (sessions and polls only) for --idle-seconds
//   max gap            the longest silence on any session from the
//                      coordinator's side while idle (keep-alives are due
//                      every heartbeat interval; a saturated coordinator
//                      stretches them), and workers it declared GONE
//   assigned           Submit of a job of world N-1 -> every rank assigned
//   bootstrapped       Submit -> every rank through the store traffic
//   aborted            one rank's session cut -> every other rank ABORTed
//   re-formed          that cut -> the next generation (the spare in the
//                      cut rank's place) through the store traffic
//
//   coordinator_load [--coordinator BIN] [--workers 256,1024] [--idle-seconds 30]
//                    [--heartbeat 1s] [--heartbeat-timeout 3s]
//                    [--workers-per-connection 16] [--json]
// --workers-per-connection 1 gives every simulated worker its own TCP
// connection, as real workers (one process each) have; the default 16
// shares one among 16, which costs the coordinator less.
// Writes the table (or JSON lines). Nothing runs this in a build or test.
#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/grpc_util.h"
#include "common/worker_credentials.h"
#include "tagi/v1/cluster.grpc.pb.h"
#include "tagi/v1/jobs.grpc.pb.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/proc_status.h"
#include "tests/testing/scratch_dir.h"

namespace tagi::bench {
namespace {

using Clock = std::chrono::steady_clock;
using tagi::v1::Cluster;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void Pin(int cpu) {
  if (static_cast<int>(std::thread::hardware_concurrency()) <= cpu) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof set, &set);
}

// /proc figures of a process.
struct ProcSample {
  long threads = 0;
  long rss_kb = 0;
  double cpu_seconds = 0;
};
ProcSample Sample(pid_t pid) {
  ProcSample s;
  s.threads = testing::ThreadCount(pid);
  s.rss_kb = testing::RssKib(pid);
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = all.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(all.substr(close + 2));
    std::string field;
    long utime = 0, stime = 0;
    for (int i = 3; rest >> field; ++i) {  // field 3 is the state
      if (i == 14) utime = std::atol(field.c_str());
      if (i == 15) {
        stime = std::atol(field.c_str());
        break;
      }
    }
    s.cpu_seconds = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return s;
}


// One asynchronous unary call: `start` issues it on the call's context,
// request and response, sent with the worker's credentials when `id` is
// set; `done` gets the status and the response.
template <typename Req, typename Resp>
void Call(absl::Duration timeout, const std::string& id, const std::string& secret, Req req,
          std::function<void(grpc::ClientContext*, const Req*, Resp*,
                             std::function<void(grpc::Status)>)>
              start,
          std::function<void(const grpc::Status&, const Resp&)> done) {
  struct State {
    std::unique_ptr<grpc::ClientContext> ctx;
    Req req;
    Resp resp;
    std::function<void(const grpc::Status&, const Resp&)> done;
  };
  auto* s = new State;
  s->req = std::move(req);
  s->done = std::move(done);
  s->ctx = MakeClientContext(timeout);
  if (!id.empty()) {
    s->ctx->AddMetadata(kWorkerIdMetadataKey, id);
    s->ctx->AddMetadata(kWorkerSecretMetadataKey, secret);
  }
  start(s->ctx.get(), &s->req, &s->resp, [s](grpc::Status st) {
    s->done(st, s->resp);
    delete s;
  });
}

struct Attempt {
  std::string job;
  uint64_t generation = 0;
  uint32_t rank = 0;
  uint32_t world = 0;
};

class Fleet;

// One simulated worker.
class SimWorker : public grpc::ClientBidiReactor<tagi::v1::SessionMessage,
                                                 tagi::v1::SessionDirective> {
 public:
  SimWorker(Fleet& fleet, int index, Cluster::Stub* stub)
      : fleet_(fleet), index_(index), stub_(stub) {}

  void Register();
  void OpenSession();
  void Heartbeat();
  void Kill();
  bool killed() const { return killed_.load(); }
  bool InAttempt() {
    std::lock_guard<std::mutex> lock(mu_);
    return !attempt_.job.empty();
  }
  const std::string& id() const { return id_; }

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

  // The longest silence from the coordinator since the last reset.
  double MaxGapSeconds();
  void ResetGap();

 private:
  void Poll();
  void Bootstrap(const tagi::v1::Assignment& a, int step);
  void Aborted(const Attempt& a, const std::string& reason);
  tagi::v1::SessionMessage Message();
  // One call of the Cluster service; the fleet counts it until its
  // callback has run (it is not torn down under a running callback).
  template <typename Req, typename Resp, typename Issue>
  void Cluster_(Req req, Issue issue, std::function<void(const grpc::Status&, const Resp&)> done,
                absl::Duration timeout = absl::Seconds(60));

  Fleet& fleet_;
  const int index_;
  Cluster::Stub* const stub_;
  std::string id_;
  std::string secret_;  // Register's credential, sent with every later call
  std::unique_ptr<grpc::ClientContext> session_ctx_ = MakeClientContext(absl::Hours(24));
  tagi::v1::SessionMessage out_;
  tagi::v1::SessionDirective in_;
  std::mutex mu_;
  bool writing_ = false;
  bool session_open_ = false;
  Attempt attempt_;  // guarded by mu_; empty job: idle
  Clock::time_point last_heard_;
  double max_gap_ = 0;
  std::atomic<bool> killed_{false};
};

// Every simulated worker, and the events the measurements wait for.
class Fleet {
 public:
  Fleet(const std::string& address, int workers, int per_connection, absl::Duration heartbeat)
      : heartbeat_(heartbeat) {
    const int channels = std::max(1, (workers + per_connection - 1) / per_connection);
    for (int c = 0; c < channels; ++c) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per channel
      args.SetInt("tagi.load.channel", c);
      auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
      stubs_.push_back(Cluster::NewStub(channel));
    }
    for (int i = 0; i < workers; ++i) {
      workers_.push_back(std::make_unique<SimWorker>(*this, i, stubs_[i % channels].get()));
    }
  }
  ~Fleet() {
    stop_ = true;
    if (ticker_.joinable()) ticker_.join();
    for (auto& w : workers_) w->Kill();
    // Every reactor must be done, and every call's callback run, before
    // they are destroyed (a poll ends within its wait).
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return sessions_done_ == opened_ && in_flight_ == 0; });
  }
  void CallStarted() {
    std::lock_guard<std::mutex> lock(mu_);
    ++in_flight_;
  }
  void CallEnded() {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
    cv_.notify_all();
  }

  absl::Duration heartbeat() const { return heartbeat_; }
  std::vector<std::unique_ptr<SimWorker>>& workers() { return workers_; }

  void StartHeartbeats() {
    ticker_ = std::thread([this] {
      const auto period = std::chrono::milliseconds(absl::ToInt64Milliseconds(heartbeat_));
      while (!stop_) {
        const auto start = Clock::now();
        for (auto& w : workers_) w->Heartbeat();
        std::this_thread::sleep_until(start + period);
      }
    });
  }

  // Counters the workers bump, and waits on them.
  void Bump(std::atomic<int>& counter) {
    ++counter;
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  bool WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)), done);
  }
  void SessionOpened() {
    std::lock_guard<std::mutex> lock(mu_);
    ++opened_;
  }
  void SessionDone() {
    std::lock_guard<std::mutex> lock(mu_);
    ++sessions_done_;
    cv_.notify_all();
  }

  std::atomic<int> registered{0};
  std::atomic<int> assigned{0};
  std::atomic<int> bootstrapped{0};
  std::atomic<int> aborted{0};
  std::atomic<uint64_t> watched_generation{0};  // counts only this generation's events
  std::atomic<int> errors{0};
  void NoteError(const std::string& message) {
    ++errors;
    std::lock_guard<std::mutex> lock(mu_);
    last_error_ = message;
  }
  std::string last_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_error_;
  }

 private:
  const absl::Duration heartbeat_;
  std::vector<std::unique_ptr<Cluster::Stub>> stubs_;
  std::vector<std::unique_ptr<SimWorker>> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  int opened_ = 0;
  int sessions_done_ = 0;
  int in_flight_ = 0;  // unary calls whose callback has not run
  std::atomic<bool> stop_{false};
  std::thread ticker_;
  std::string last_error_;  // guarded by mu_
};

template <typename Req, typename Resp, typename Issue>
void SimWorker::Cluster_(Req req, Issue issue,
                         std::function<void(const grpc::Status&, const Resp&)> done,
                         absl::Duration timeout) {
  fleet_.CallStarted();
  Call<Req, Resp>(
      timeout, id_, secret_, std::move(req),
      [this, issue](grpc::ClientContext* c, const Req* q, Resp* r,
                    std::function<void(grpc::Status)> f) { issue(stub_->async(), c, q, r, f); },
      [this, done = std::move(done)](const grpc::Status& st, const Resp& resp) {
        done(st, resp);
        fleet_.CallEnded();
      });
}

void SimWorker::Register() {
  tagi::v1::RegisterRequest req;
  req.set_hostname(absl::StrCat("sim-", index_));
  req.set_device("cpu");
  req.set_threads(1);
  Cluster_<tagi::v1::RegisterRequest, tagi::v1::RegisterResponse>(
      req,
      [](auto* a, auto* c, auto* q, auto* r, auto f) { a->Register(c, q, r, std::move(f)); },
      [this](const grpc::Status& st, const tagi::v1::RegisterResponse& resp) {
        if (!st.ok()) {
          fleet_.NoteError(st.error_message());
          Register();  // as a worker does: try again
          return;
        }
        id_ = resp.worker_id();
        secret_ = resp.secret();
        fleet_.Bump(fleet_.registered);
      });
}

tagi::v1::SessionMessage SimWorker::Message() {
  tagi::v1::SessionMessage m;
  m.set_worker_id(id_);
  m.set_hostname(absl::StrCat("sim-", index_));
  m.set_device("cpu");
  if (!attempt_.job.empty()) {
    m.set_job_id(attempt_.job);
    m.set_generation(attempt_.generation);
    m.set_rank(attempt_.rank);
  }
  return m;
}

void SimWorker::OpenSession() {
  session_ctx_->AddMetadata(kWorkerIdMetadataKey, id_);
  session_ctx_->AddMetadata(kWorkerSecretMetadataKey, secret_);
  stub_->async()->Session(session_ctx_.get(), this);
  {
    std::lock_guard<std::mutex> lock(mu_);
    out_ = Message();
    writing_ = true;
    session_open_ = true;
    last_heard_ = Clock::now();
  }
  fleet_.SessionOpened();
  StartWrite(&out_);
  StartRead(&in_);
  StartCall();
  Poll();
}

void SimWorker::Heartbeat() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!session_open_ || writing_ || killed_) return;
  out_ = Message();
  writing_ = true;
  StartWrite(&out_);
}

void SimWorker::OnWriteDone(bool /*ok*/) {
  std::lock_guard<std::mutex> lock(mu_);
  writing_ = false;
}

void SimWorker::OnReadDone(bool ok) {
  if (!ok) return;  // OnDone follows
  Attempt abort;
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = Clock::now();
    max_gap_ = std::max(max_gap_, std::chrono::duration<double>(now - last_heard_).count());
    last_heard_ = now;
    if (in_.directive() == tagi::v1::ABORT && !attempt_.job.empty() &&
        in_.job_id() == attempt_.job && in_.generation() == attempt_.generation) {
      abort = attempt_;
      reason = in_.reason();
      attempt_ = {};
    }
  }
  if (!abort.job.empty()) Aborted(abort, reason);
  StartRead(&in_);
}

void SimWorker::OnDone(const grpc::Status& /*status*/) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    session_open_ = false;
  }
  fleet_.SessionDone();
}

double SimWorker::MaxGapSeconds() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!session_open_) return max_gap_;
  return std::max(max_gap_, std::chrono::duration<double>(Clock::now() - last_heard_).count());
}

void SimWorker::ResetGap() {
  std::lock_guard<std::mutex> lock(mu_);
  max_gap_ = 0;
  last_heard_ = Clock::now();
}

void SimWorker::Kill() {
  if (killed_.exchange(true)) return;
  session_ctx_->TryCancel();
}

void SimWorker::Poll() {
  if (killed_) return;
  tagi::v1::RendezvousRequest req;
  req.set_worker_id(id_);
  req.set_wait_ms(2000);
  Cluster_<tagi::v1::RendezvousRequest, tagi::v1::RendezvousResponse>(
      req,
      [](auto* a, auto* c, auto* q, auto* r, auto f) { a->Rendezvous(c, q, r, std::move(f)); },
      [this](const grpc::Status& st, const tagi::v1::RendezvousResponse& resp) {
        if (killed_) return;
        if (!st.ok() || !resp.assigned()) {
          if (!st.ok()) fleet_.NoteError(st.error_message());
          Poll();
          return;
        }
        const tagi::v1::Assignment& a = resp.assignment();
        if (a.generation() == fleet_.watched_generation.load()) fleet_.Bump(fleet_.assigned);
        Bootstrap(a, 0);
      },
      absl::Seconds(30));
}

// The store traffic of a ring bootstrap and the replica check, one call
// after another; then the worker is in its attempt.
void SimWorker::Bootstrap(const tagi::v1::Assignment& a, int step) {
  if (killed_) return;
  const uint32_t rank = a.rank(), world = a.world_size();
  auto next = [this, a, step](const grpc::Status& st) {
    if (!st.ok()) {
      // The generation is over (ABORTED) or a key never came: report, poll.
      fleet_.NoteError(st.error_message());
      Aborted({a.job_id(), a.generation(), a.rank(), a.world_size()}, st.error_message());
      return;
    }
    Bootstrap(a, step + 1);
  };
  auto set = [&](const std::string& key, const std::string& value) {
    tagi::v1::StoreSetRequest req;
    req.set_job_id(a.job_id());
    req.set_generation(a.generation());
    req.set_key(key);
    req.set_value(value);
    Cluster_<tagi::v1::StoreSetRequest, tagi::v1::StoreSetResponse>(
        req, [](auto* s, auto* c, auto* q, auto* r, auto f) { s->StoreSet(c, q, r, std::move(f)); },
        [next](const grpc::Status& st, const tagi::v1::StoreSetResponse&) { next(st); });
  };
  auto get = [&](const std::string& key) {
    tagi::v1::StoreGetRequest req;
    req.set_job_id(a.job_id());
    req.set_generation(a.generation());
    req.set_key(key);
    req.set_wait_ms(30000);
    Cluster_<tagi::v1::StoreGetRequest, tagi::v1::StoreGetResponse>(
        req, [](auto* s, auto* c, auto* q, auto* r, auto f) { s->StoreGet(c, q, r, std::move(f)); },
        [next](const grpc::Status& st, const tagi::v1::StoreGetResponse&) { next(st); });
  };
  switch (step) {
    case 0:
      if (rank == 0) return set("ring/group", "12345");
      return Bootstrap(a, 1);
    case 1:
      return set(absl::StrCat("ring/addr/", rank), absl::StrCat("127.0.0.1:", 20000 + rank));
    case 2:
      return get("ring/group");
    case 3:
      return get(absl::StrCat("ring/addr/", (rank + 1) % world));
    case 4:
      return set(absl::StrCat("replica/", rank), "00000000deadbeef");
    case 5:
      if (rank != 0) return get("replica/0");
      return Bootstrap(a, 6);
    default: {
      {
        std::lock_guard<std::mutex> lock(mu_);
        attempt_ = {a.job_id(), a.generation(), rank, world};
      }
      if (a.generation() == fleet_.watched_generation.load()) fleet_.Bump(fleet_.bootstrapped);
      return;
    }
  }
}

void SimWorker::Aborted(const Attempt& a, const std::string& reason) {
  if (a.generation == fleet_.watched_generation.load()) fleet_.Bump(fleet_.aborted);
  tagi::v1::FinishJobRequest fin;
  fin.set_worker_id(id_);
  fin.set_job_id(a.job);
  fin.set_generation(a.generation);
  fin.set_rank(a.rank);
  fin.set_ok(false);
  fin.set_retryable(true);
  fin.set_reason(absl::StrCat("aborted: ", reason));
  Cluster_<tagi::v1::FinishJobRequest, tagi::v1::FinishJobResponse>(
      fin, [](auto* s, auto* c, auto* q, auto* r, auto f) { s->FinishJob(c, q, r, std::move(f)); },
      [this](const grpc::Status&, const tagi::v1::FinishJobResponse&) { Poll(); });
}

struct Row {
  int workers = 0;
  double register_all = 0;
  ProcSample idle;
  double idle_cpu = 0;  // share of one core
  double max_gap = 0;
  int gone = 0;
  double assigned = -1, bootstrapped = -1, aborted = -1, reformed = -1;
  int errors = 0;
  int gone_at_end = 0;
  std::string job_state;
  std::string error;
};

Row Measure(const std::string& binary, int n, int per_connection, double idle_seconds,
            absl::Duration heartbeat, absl::Duration timeout) {
  Row row;
  row.workers = n;
  testing::TempDir dir;
  testing::CoordinatorLaunch launch;
  launch.flags = {"--world",
                  absl::StrCat(n),
                  "--heartbeat-interval",
                  absl::FormatDuration(heartbeat),
                  "--heartbeat-timeout",
                  absl::FormatDuration(timeout),
                  "--max-worker-streams",
                  absl::StrCat(4 * n + 64),
                  "--state-dir",
                  dir.File("state")};
  Pin(0);  // the coordinator inherits CPU 0
  testing::StartedCoordinator coord = testing::StartCoordinator(binary, dir, launch);
  Pin(1);
  if (!coord.ok()) {
    row.error = coord.error;
    return row;
  }
  const pid_t pid = coord.process->Pid();
  auto fleet = std::make_unique<Fleet>(coord.address, n, per_connection, heartbeat);
  auto& ws = fleet->workers();

  // Register all.
  const auto t0 = Clock::now();
  for (auto& w : ws) w->Register();
  if (!fleet->WaitFor([&] { return fleet->registered.load() == n; }, absl::Minutes(10))) {
    row.error = absl::StrCat("only ", fleet->registered.load(), " registered");
    return row;
  }
  row.register_all = SecondsSince(t0);

  // Sessions and polls; idle.
  for (auto& w : ws) w->OpenSession();
  fleet->StartHeartbeats();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  for (auto& w : ws) w->ResetGap();
  const ProcSample before = Sample(pid);
  const auto idle_start = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(idle_seconds * 1000)));
  const ProcSample after = Sample(pid);
  row.idle = after;
  row.idle_cpu = (after.cpu_seconds - before.cpu_seconds) / SecondsSince(idle_start);
  for (auto& w : ws) row.max_gap = std::max(row.max_gap, w->MaxGapSeconds());

  auto jobs = tagi::v1::Jobs::NewStub(
      grpc::CreateChannel(coord.address, grpc::InsecureChannelCredentials()));
  {
    const auto ctx = MakeClientContext(absl::Seconds(30));
    tagi::v1::ListWorkersRequest req;
    tagi::v1::ListWorkersResponse resp;
    if (jobs->ListWorkers(ctx.get(), req, &resp).ok()) {
      for (const auto& w : resp.workers()) row.gone += w.state() == "GONE" ? 1 : 0;
    }
  }

  // Submit a job of world n - 1 (one spare).
  auto spec = LoadJobSpecFile("examples/fmnist_fnn.json");
  if (!spec.ok()) {
    row.error = std::string(spec.status().message());
    return row;
  }
  spec->set_world_size(static_cast<uint32_t>(n - 1));
  spec->set_epochs(1);
  fleet->watched_generation = 1;
  const auto t_submit = Clock::now();
  tagi::v1::Job job;
  {
    const auto ctx = MakeClientContext(absl::Seconds(30));
    tagi::v1::SubmitJobRequest req;
    *req.mutable_spec() = *spec;
    const grpc::Status st = jobs->Submit(ctx.get(), req, &job);
    if (!st.ok()) {
      row.error = absl::StrCat("submit: ", st.error_message());
      return row;
    }
  }
  const int world = n - 1;
  if (fleet->WaitFor([&] { return fleet->assigned.load() >= world; }, absl::Minutes(5))) {
    row.assigned = SecondsSince(t_submit);
  }
  if (fleet->WaitFor([&] { return fleet->bootstrapped.load() >= world; }, absl::Minutes(5))) {
    row.bootstrapped = SecondsSince(t_submit);
  }

  // Cut one rank's session: every other rank must be aborted, and the next
  // generation (with the spare) bootstrapped.
  if (row.bootstrapped >= 0) {
    fleet->aborted = 0;
    const auto t_kill = Clock::now();
    for (auto& w : ws) {  // a rank of the job (one worker is the spare)
      if (w->InAttempt()) {
        w->Kill();
        break;
      }
    }
    if (fleet->WaitFor([&] { return fleet->aborted.load() >= world - 1; }, absl::Minutes(2))) {
      row.aborted = SecondsSince(t_kill);
    }
    fleet->assigned = 0;
    fleet->bootstrapped = 0;
    fleet->watched_generation = 2;
    if (fleet->WaitFor([&] { return fleet->bootstrapped.load() >= world; }, absl::Minutes(5))) {
      row.reformed = SecondsSince(t_kill);
    }
  }
  {
    // Workers declared gone by the end (only the cut one should be), and
    // where the job stands.
    const auto ctx = MakeClientContext(absl::Seconds(30));
    tagi::v1::ListWorkersRequest req;
    tagi::v1::ListWorkersResponse resp;
    if (jobs->ListWorkers(ctx.get(), req, &resp).ok()) {
      for (const auto& w : resp.workers()) row.gone_at_end += w.state() == "GONE" ? 1 : 0;
    }
    const auto ctx2 = MakeClientContext(absl::Seconds(30));
    tagi::v1::GetJobRequest get;
    get.set_id(job.id());
    tagi::v1::Job now;
    if (jobs->Get(ctx2.get(), get, &now).ok()) {
      row.job_state = absl::StrCat(tagi::v1::JobState_Name(now.state()), " gen ", now.generation(),
                                   " ", now.reason());
    }
  }
  row.errors = fleet->errors.load();
  if (row.errors > 0 && row.error.empty()) row.error = "last error: " + fleet->last_error();
  {
    const auto ctx = MakeClientContext(absl::Seconds(10));
    tagi::v1::CancelJobRequest req;
    req.set_id(job.id());
    tagi::v1::Job ignored;
    (void)jobs->Cancel(ctx.get(), req, &ignored);
  }
  fleet.reset();
  return row;
}

std::string Fmt(double seconds) {
  return seconds < 0 ? std::string("-") : absl::StrFormat("%.2f s", seconds);
}

int Main(int argc, char** argv) {
  std::string binary = "build/bin/tagi-coordinator";
  std::vector<int> counts = {256, 1024};
  double idle_seconds = 30;
  absl::Duration heartbeat = absl::Seconds(1), timeout = absl::Seconds(3);
  int per_connection = 16;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--coordinator" && has_value) {
      binary = argv[++i];
    } else if (a == "--workers" && has_value) {
      counts.clear();
      for (absl::string_view part : absl::StrSplit(argv[++i], ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(part, &n) || n < 2) {
          std::fprintf(stderr, "coordinator_load: --workers takes counts of at least 2\n");
          return 2;
        }
        counts.push_back(n);
      }
    } else if (a == "--workers-per-connection" && has_value) {
      if (!absl::SimpleAtoi(argv[++i], &per_connection) || per_connection < 1) {
        std::fprintf(stderr, "coordinator_load: --workers-per-connection takes a count >= 1\n");
        return 2;
      }
    } else if (a == "--idle-seconds" && has_value) {
      idle_seconds = std::atof(argv[++i]);
    } else if ((a == "--heartbeat" || a == "--heartbeat-timeout") && has_value) {
      absl::Duration d;
      if (!absl::ParseDuration(argv[++i], &d)) {
        std::fprintf(stderr, "coordinator_load: %s takes a duration (1s)\n", a.c_str());
        return 2;
      }
      (a == "--heartbeat" ? heartbeat : timeout) = d;
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr,
                   "usage: coordinator_load [--coordinator BIN] [--workers 256,1024] "
                   "[--idle-seconds 30] [--heartbeat 1s] [--heartbeat-timeout 3s] "
                   "[--workers-per-connection 16] [--json]\n");
      return 2;
    }
  }
  if (!json) {
    std::printf("| workers | register all | threads | idle CPU | RSS | max session gap | GONE | "
                "submit -> all assigned | -> bootstrapped | kill -> all aborted | kill -> "
                "re-formed | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  }
  for (const int n : counts) {
    const Row r = Measure(binary, n, per_connection, idle_seconds, heartbeat, timeout);
    if (json) {
      std::printf(
          "{\"workers\":%d,\"workers_per_connection\":%d,\"register_all_s\":%.3f,\"threads\":%ld,\"idle_cpu\":%.3f,"
          "\"rss_mb\":%.1f,\"max_gap_s\":%.3f,\"gone\":%d,\"assigned_s\":%.3f,"
          "\"bootstrapped_s\":%.3f,\"aborted_s\":%.3f,\"reformed_s\":%.3f,\"errors\":%d,"
          "\"gone_at_end\":%d,\"error\":\"%s\"}\n",
          n, per_connection, r.register_all, r.idle.threads, r.idle_cpu, r.idle.rss_kb / 1024.0, r.max_gap, r.gone,
          r.assigned, r.bootstrapped, r.aborted, r.reformed, r.errors, r.gone_at_end,
          r.error.c_str());
    } else {
      std::printf("| %d | %s | %ld | %.0f %% | %.0f MB | %s | %d | %s | %s | %s | %s | %d%s%s |\n",
                  n, Fmt(r.register_all).c_str(), r.idle.threads, 100.0 * r.idle_cpu,
                  r.idle.rss_kb / 1024.0, Fmt(r.max_gap).c_str(), r.gone, Fmt(r.assigned).c_str(),
                  Fmt(r.bootstrapped).c_str(), Fmt(r.aborted).c_str(), Fmt(r.reformed).c_str(),
                  r.errors, r.error.empty() ? "" : " ", r.error.c_str());
    }
    if (!r.job_state.empty() || r.gone_at_end > 1) {
      std::fprintf(stderr, "coordinator_load: %d workers: job at the end: %.200s; %d workers gone\n",
                   n, r.job_state.c_str(), r.gone_at_end);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace tagi::bench

int main(int argc, char** argv) { return tagi::bench::Main(argc, argv); }
