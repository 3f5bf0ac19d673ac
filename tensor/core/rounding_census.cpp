#include "tensor/core/rounding_census.h"

#include "tensor/core/error.h"

namespace mixtape {

namespace {
void reset_census() {
  for (auto* c : {&detail::census.rounded, &detail::census.nonzero, &detail::census.underflow,
                  &detail::census.subnormal, &detail::census.overflow})
    c->store(0, std::memory_order_relaxed);
}
}  // namespace

RoundingCensus::RoundingCensus() {
  MT_CHECK(!detail::census_open.load(), "RoundingCensus: a census is already open (they do not nest)");
  reset_census();
  detail::census_generation.fetch_add(1);
  detail::census_open.store(true);
}

RoundingCensus::~RoundingCensus() { detail::census_open.store(false); }

RoundingCounts RoundingCensus::counts() const { return current(); }

bool RoundingCensus::is_open() { return detail::census_open.load(); }

RoundingCounts RoundingCensus::current() {
  const auto& c = detail::census;
  return {c.rounded.load(), c.nonzero.load(), c.underflow.load(), c.subnormal.load(), c.overflow.load()};
}

uint64_t RoundingCensus::generation() { return detail::census_generation.load(); }

RoundingCounts operator-(const RoundingCounts& a, const RoundingCounts& b) {
  return {a.rounded - b.rounded, a.nonzero - b.nonzero, a.underflow - b.underflow, a.subnormal - b.subnormal,
          a.overflow - b.overflow};
}

RoundingCounts& operator+=(RoundingCounts& a, const RoundingCounts& b) {
  a.rounded += b.rounded;
  a.nonzero += b.nonzero;
  a.underflow += b.underflow;
  a.subnormal += b.subnormal;
  a.overflow += b.overflow;
  return a;
}

}  // namespace mixtape
