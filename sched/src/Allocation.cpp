#include <tessel/sched/Allocation.hpp>

#include <tessel/core/Error.hpp>

namespace tessel::sched {

Allocation::Allocation(Cluster const &cluster)
    : _cluster(&cluster), _owner(static_cast<std::size_t>(cluster.num_gpus()), kFree),
      _free_node(static_cast<std::size_t>(cluster.num_nodes())),
      _free_type(static_cast<std::size_t>(cluster.num_types()), 0) {
  for (int n = 0; n < cluster.num_nodes(); ++n) {
    _free_node[static_cast<std::size_t>(n)] = cluster.node_capacity(n);
    _free_type[static_cast<std::size_t>(cluster.node_type(n))] += cluster.node_capacity(n);
  }
}

bool Allocation::node_down(int node) const {
  return _owner[static_cast<std::size_t>(_cluster->node_first_gpu(node))] == kDown;
}

void Allocation::assign(int gpu, int job) {
  auto &o = _owner[static_cast<std::size_t>(gpu)];
  TESSEL_REQUIRE(job >= 0, "job id must be >= 0, got ", job);
  TESSEL_REQUIRE(o == kFree, "GPU ", gpu, " is not free (held by ", o, "), cannot give it to job ", job);
  o = job;
  int const node = _cluster->gpu_node(gpu);
  --_free_node[static_cast<std::size_t>(node)];
  --_free_type[static_cast<std::size_t>(_cluster->node_type(node))];
}

void Allocation::release_gpu(int gpu) {
  auto &o = _owner[static_cast<std::size_t>(gpu)];
  TESSEL_REQUIRE(o >= 0, "GPU ", gpu, " is not held by a job");
  o = kFree;
  int const node = _cluster->gpu_node(gpu);
  ++_free_node[static_cast<std::size_t>(node)];
  ++_free_type[static_cast<std::size_t>(_cluster->node_type(node))];
}

int Allocation::release(int job) {
  int n = 0;
  for (std::size_t g = 0; g < _owner.size(); ++g)
    if (_owner[g] == job) {
      release_gpu(static_cast<int>(g));
      ++n;
    }
  return n;
}

void Allocation::set_node_down(int node, bool down) {
  int const first = _cluster->node_first_gpu(node), cap = _cluster->node_capacity(node);
  int const type = _cluster->node_type(node);
  for (int g = first; g < first + cap; ++g) {
    auto &o = _owner[static_cast<std::size_t>(g)];
    if (down) {
      TESSEL_REQUIRE(o == kFree, "node ", node, " must be free before it goes down (GPU ", g, " held by ", o, ")");
      o = kDown;
    } else {
      TESSEL_REQUIRE(o == kDown, "node ", node, " is not down");
      o = kFree;
    }
  }
  _free_node[static_cast<std::size_t>(node)] = down ? 0 : cap;
  _free_type[static_cast<std::size_t>(type)] += down ? -cap : cap;
}

std::vector<int> Allocation::gpus_of(int job) const {
  std::vector<int> out;
  for (std::size_t g = 0; g < _owner.size(); ++g)
    if (_owner[g] == job)
      out.push_back(static_cast<int>(g));
  return out;
}

int Allocation::held_on_node(int job, int node) const {
  int const first = _cluster->node_first_gpu(node), cap = _cluster->node_capacity(node);
  int n = 0;
  for (int g = first; g < first + cap; ++g)
    n += _owner[static_cast<std::size_t>(g)] == job;
  return n;
}

bool Placement::uniform() const {
  for (int c : counts)
    if (c != counts.front())
      return false;
  return !counts.empty();
}
int Placement::hosts() const { return uniform() ? static_cast<int>(nodes.size()) : -1; }
int Placement::per_host() const { return uniform() ? counts.front() : -1; }

Placement placement_of(Allocation const &alloc, int job) {
  Placement p;
  auto const &c = alloc.cluster();
  auto const &owners = alloc.owners();
  for (std::size_t g = 0; g < owners.size(); ++g) {
    if (owners[g] != job)
      continue;
    int const node = c.gpu_node(static_cast<int>(g));
    int const type = c.node_type(node);
    TESSEL_REQUIRE(p.gpu_type < 0 || p.gpu_type == type, "job ", job, " holds GPUs of two types (",
                   c.type(p.gpu_type).name, " and ", c.type(type).name, ")");
    p.gpu_type = type;
    ++p.num_gpus;
    if (p.nodes.empty() || p.nodes.back() != node) {
      p.nodes.push_back(node);
      p.counts.push_back(0);
    }
    ++p.counts.back();
  }
  return p;
}

} // namespace tessel::sched
