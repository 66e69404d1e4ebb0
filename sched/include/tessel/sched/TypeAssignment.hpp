#ifndef TESSEL_SCHED_TYPEASSIGNMENT_HPP
#define TESSEL_SCHED_TYPEASSIGNMENT_HPP

/// \file TypeAssignment.hpp
/// \brief Exact solver of Gavel's max-sum-throughput assignment as Arena poses it when a job arrives: every admitted
/// job gets one GPU type, the GPUs assigned per type may not exceed the type's total, and at most `max_moves`
/// already admitted jobs may change type. Arena solves it as a boolean ILP with cvxpy/CPLEX; with a migration bound
/// this small it is solved exactly here by enumerating multisets of move classes (source type, target type, GPU
/// count), taking the best jobs of each class.

#include <vector>

namespace tessel::sched {

/// \brief Gavel's max-sum-throughput assignment of GPU types to jobs when a job arrives: the admitted jobs may
/// change type (at most \p max_moves of them) to make room.
struct TypeAssignmentProblem {
  std::vector<int> capacity;              ///< GPUs per type
  std::vector<int> gpus;                  ///< GPUs of each admitted job
  std::vector<int> current;               ///< current type of each admitted job
  std::vector<std::vector<double>> value; ///< [job][type] throughput (may hold the -1e9 infeasible value)
  int new_gpus = 0;                       ///< the arriving job
  std::vector<double> new_value;          ///< [type]
  int max_moves = 3;                      ///< jobs that may change type
};

/// \brief The solution of a TypeAssignmentProblem.
struct TypeAssignment {
  bool feasible = false;                  ///< the arriving job fits somewhere
  int new_type = -1;                      ///< its type
  std::vector<std::pair<int, int>> moves; ///< (job, new type)
  double objective = 0;                   ///< total value of the assignment
};

/// \brief Maximizes the total value. Ties prefer fewer moves, then lower type indices. Infeasible when no
/// assignment meets the capacities (the existing assignment is not required to meet them).
TypeAssignment solve_type_assignment(TypeAssignmentProblem const &problem);

} // namespace tessel::sched

#endif
