#ifndef TESSEL_APPS_SCHED_COMMANDS_HPP
#define TESSEL_APPS_SCHED_COMMANDS_HPP

// Sub-commands of tessel-sched and their command-line parsing.

#include <map>
#include <string>
#include <vector>

namespace tessel::sched::app {

/// `--key value` and `--flag` options; every option must be consumed (unknown ones are errors).
class Args {
public:
  Args(int argc, char **argv);
  bool flag(std::string const &name);
  std::string get(std::string const &name, std::string const &fallback);
  std::string require(std::string const &name);
  double number(std::string const &name, double fallback);
  long long integer(std::string const &name, long long fallback);
  bool has(std::string const &name) const { return _values.count(name) > 0; }
  /// Throws naming the first option nobody asked for.
  void finish() const;

private:
  std::map<std::string, std::string> _values;
  std::map<std::string, bool> _used;
};

int simulate_command(Args &args);
int estimate_command(Args &args);
int cells_command(Args &args);

} // namespace tessel::sched::app

#endif
