#include "../impl/PolicyHelpers.hpp"

namespace tessel::sched::Impl {

std::vector<int> nodes_with_free(Allocation const &alloc, int type, int need) {
  auto const &cluster = alloc.cluster();
  std::vector<int> nodes;
  for (int n : cluster.type_nodes(type))
    if (alloc.free_on_node(n) >= need)
      nodes.push_back(n);
  std::stable_sort(nodes.begin(), nodes.end(),
                   [&](int a, int b) { return alloc.free_on_node(a) > alloc.free_on_node(b); });
  return nodes;
}

bool place_scatter(Allocation &alloc, int job, int type, Layout layout) {
  if (layout.per_host < 1 || layout.hosts < 1)
    return false;
  auto const nodes = nodes_with_free(alloc, type, layout.per_host);
  if (static_cast<int>(nodes.size()) < layout.hosts)
    return false;
  auto const &cluster = alloc.cluster();
  for (int h = 0; h < layout.hosts; ++h) {
    int const n = nodes[static_cast<std::size_t>(h)];
    int placed = 0;
    for (int g = cluster.node_first_gpu(n);
         g < cluster.node_first_gpu(n) + cluster.node_capacity(n) && placed < layout.per_host; ++g)
      if (alloc.owner(g) == kFree) {
        alloc.assign(g, job);
        ++placed;
      }
  }
  return true;
}

void insert_by_priority(std::vector<int> &queue, std::vector<JobRecord> const &jobs, int job) {
  auto const &j = jobs[static_cast<std::size_t>(job)];
  auto it = std::find_if(queue.begin(), queue.end(), [&](int other) {
    auto const &o = jobs[static_cast<std::size_t>(other)];
    return o.submit_round > j.submit_round || (o.submit_round == j.submit_round && o.id > j.id);
  });
  queue.insert(it, job);
}

std::string describe(Cluster const &cluster, int type, int gpus) {
  return std::to_string(gpus) + " x " + cluster.type(type).name;
}

} // namespace tessel::sched::Impl
