// Test etcd clusters (cluster.hpp).
#include "etcd/cluster.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "etcd/client.hpp"
#include "os/clock.hpp"

namespace olt {

namespace etcd = offload_lock::detail::etcd;

std::optional<std::string> etcd_exe() {
  for (const char* p : {"/usr/bin/etcd", "/usr/local/bin/etcd"})
    if (::access(p, X_OK) == 0) return std::string(p);
  return std::nullopt;
}

std::vector<int> free_ports(int n) {
  // All bound at once, so that no two are the same port.
  std::vector<int> socks, ports;
  for (int k = 0; k < n; ++k) {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ::close(s);
      for (int o : socks) ::close(o);
      throw std::runtime_error("no free port");
    }
    socks.push_back(s);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int s : socks) ::close(s);
  return ports;
}

int free_port() { return free_ports(1).front(); }

nlohmann::json acquired(child& h) {
  auto line = h.read_line(30s);
  REQUIRE(line);
  REQUIRE(line->rfind("acquired ", 0) == 0);
  return nlohmann::json::parse(line->substr(9));
}

etcd::client client_of(const etcd_cluster& c) {
  std::vector<etcd::endpoint> eps;
  for (int k = 0; k < c.size(); ++k) {
    const std::string ep = c.endpoint(k);
    eps.push_back({"127.0.0.1", static_cast<std::uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)))});
  }
  return etcd::client(eps);
}

offload_lock::detail::sys::net_bounds soon() { return {offload_lock::detail::sys::monotonic_ms() + 5000, {}}; }

struct etcd_cluster::member {
  std::string name;
  int client_port = 0, peer_port = 0;
  std::unique_ptr<child> proc;
  bool started_once = false;
};

etcd_cluster::etcd_cluster(int members) {
  if (!etcd_exe()) throw std::runtime_error("no etcd on this machine");
  token_ = "olt-" + std::to_string(::getpid()) + "-" + std::to_string(now_ms());
  const std::vector<int> ports = free_ports(2 * members);
  for (int k = 0; k < members; ++k) {
    auto m = std::make_unique<member>();
    m->name = "m" + std::to_string(k);
    m->client_port = ports[static_cast<std::size_t>(2 * k)];
    m->peer_port = ports[static_cast<std::size_t>(2 * k + 1)];
    initial_cluster_ += (k ? "," : "") + m->name + "=http://127.0.0.1:" + std::to_string(m->peer_port);
    members_.push_back(std::move(m));
  }
  for (int k = 0; k < members; ++k) start(k);
  if (!has_leader(60s)) {
    std::string logs;
    for (auto& m : members_) logs += "\n" + m->name + ": " + m->proc->err_text().substr(0, 2000);
    throw std::runtime_error("the test etcd cluster elected no leader within 60 s" + logs);
  }
}

etcd_cluster::~etcd_cluster() {
  for (auto& m : members_)
    if (m->proc && !m->proc->exited()) {
      m->proc->kill(SIGCONT);
      m->proc->kill(SIGKILL);
      (void)m->proc->wait(30s);
    }
}

std::string etcd_cluster::endpoint(int k) const {
  return "127.0.0.1:" + std::to_string(members_.at(static_cast<std::size_t>(k))->client_port);
}

std::string etcd_cluster::endpoints() const {
  std::string s;
  for (int k = 0; k < size(); ++k) s += (k ? "," : "") + endpoint(k);
  return s;
}

std::string etcd_cluster::url(const std::string& name) const { return "etcd://" + endpoints() + "/" + name; }

void etcd_cluster::start(int k) {
  member& m = *members_.at(static_cast<std::size_t>(k));
  const std::string client = "http://127.0.0.1:" + std::to_string(m.client_port);
  const std::string peer = "http://127.0.0.1:" + std::to_string(m.peer_port);
  std::vector<std::string> args{"--name", m.name,
                                "--data-dir", (dir_.path / m.name).string(),
                                "--listen-client-urls", client,
                                "--advertise-client-urls", client,
                                "--listen-peer-urls", peer,
                                "--initial-advertise-peer-urls", peer,
                                "--initial-cluster", initial_cluster_,
                                "--initial-cluster-token", token_,
                                "--initial-cluster-state", m.started_once ? "existing" : "new",
                                "--heartbeat-interval", "50",
                                "--election-timeout", "500",
                                "--logger", "zap",
                                "--log-level", "error"};
  m.proc = std::make_unique<child>(*etcd_exe(), args);
  m.started_once = true;
}

void etcd_cluster::kill(int k) {
  auto& m = *members_.at(static_cast<std::size_t>(k));
  if (!m.proc || m.proc->exited()) return;
  m.proc->kill(SIGCONT);
  m.proc->kill(SIGKILL);
  (void)m.proc->wait(30s);
}

void etcd_cluster::stop(int k) { members_.at(static_cast<std::size_t>(k))->proc->kill(SIGSTOP); }
void etcd_cluster::resume(int k) { members_.at(static_cast<std::size_t>(k))->proc->kill(SIGCONT); }

bool etcd_cluster::running(int k) const {
  const auto& m = *members_.at(static_cast<std::size_t>(k));
  return m.proc && !m.proc->exited() && process_state(m.proc->pid()) != 'T';
}

bool etcd_cluster::has_leader(ms timeout) const {
  return eventually(
      [&] {
        int with_leader = 0, up = 0;
        for (int k = 0; k < size(); ++k) {
          if (!running(k)) continue;
          ++up;
          auto colon = endpoint(k).rfind(':');
          etcd::client c({etcd::endpoint{"127.0.0.1", static_cast<std::uint16_t>(std::stoi(endpoint(k).substr(colon + 1)))}});
          auto s = c.status({offload_lock::detail::sys::monotonic_ms() + 1000, {}});
          if (s && s->leader != 0) ++with_leader;
        }
        return up > 0 && with_leader == up;
      },
      timeout);
}

std::vector<std::string> etcd_args(const etcd_cluster& c, const std::string& name, std::vector<std::string> args) {
  args.insert(args.begin(), {"--lock", c.url(name)});
  return args;
}

cli_result etcd_cli(const etcd_cluster& c, const std::string& name, std::vector<std::string> args,
                    const env_changes& env, ms timeout) {
  return run_cli(etcd_args(c, name, std::move(args)), env, timeout);
}

bool eventually_every_50ms(const std::function<bool()>& pred, ms timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(50ms);
  }
}

int waiting_count(const etcd_cluster& c, const std::string& name) {
  auto r = etcd_cli(c, name, {"--json", "status"});
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (!j.is_object() || !j.contains("waiters") || !j["waiters"].is_array()) return -1;
  return static_cast<int>(j["waiters"].size());
}

long long etcd_metric(const etcd_cluster& c, int member, const std::string& name) {
  const std::string ep = c.endpoint(member);
  const int port = std::stoi(ep.substr(ep.rfind(':') + 1));
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return -1;
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: " + ep + "\r\n\r\n";
  if (::write(s, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(s);
    return -1;
  }
  std::string body;
  char buf[65536];
  for (ssize_t n; (n = ::read(s, buf, sizeof buf)) > 0;) body.append(buf, static_cast<std::size_t>(n));
  ::close(s);
  const std::string key = "\n" + name + " ";
  const auto at = body.find(key);
  if (at == std::string::npos) return -1;
  return std::stoll(body.substr(at + key.size()));
}

}  // namespace olt
