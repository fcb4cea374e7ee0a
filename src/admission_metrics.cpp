// AdmissionStats in the Prometheus text format: sluice_admission_*.
#include "sluice/admission.h"
#include "sluice/metrics.h"

namespace sluice {

std::string to_prometheus(const AdmissionStats& s, std::string_view name) {
  PrometheusWriter w;
  const std::string n = prometheus_name_label(name);
  const auto one = [&](const char* metric, const char* type, const char* help, double v) {
    w.family(metric, type, help, n, v);
  };
  const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  one("sluice_admission_admitted_total", "counter", "Permits ever given.", d(s.admitted));
  one("sluice_admission_waits_total", "counter", "Acquires that found the bound reached.",
      d(s.waits));
  one("sluice_admission_refused_total", "counter",
      "try_acquire calls on a full bound, and acquires whose Context ended.", d(s.refused));
  one("sluice_admission_waited_seconds_total", "counter",
      "Time acquires spent waiting, summed (waits in progress not).", s.waited_s);
  one("sluice_admission_bound", "gauge", "Permits that may be out at once.", d(s.bound));
  one("sluice_admission_in_flight", "gauge", "Permits out now.", d(s.in_flight));
  one("sluice_admission_peak", "gauge", "Most permits ever out at once.", d(s.peak));
  return w.text();
}

}  // namespace sluice
