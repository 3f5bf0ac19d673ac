#include "tensor/dtype.h"

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
  detail::census_open.store(true);
}

RoundingCensus::~RoundingCensus() { detail::census_open.store(false); }

RoundingCounts RoundingCensus::counts() const {
  const auto& c = detail::census;
  return {c.rounded.load(), c.nonzero.load(), c.underflow.load(), c.subnormal.load(), c.overflow.load()};
}

}  // namespace mixtape
