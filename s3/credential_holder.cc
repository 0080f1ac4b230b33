#include "s3/credential_holder.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"

namespace dsfs {
namespace {

int64_t SystemNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// How long after a failed refresh the next try is: every 5 s, sooner while the current keys
// have less than 10 s left (half of what is left, at least 1 s).
int64_t RetryAfterFailureS(int64_t left_s) {
  return left_s > 0 ? std::clamp<int64_t>(left_s / 2, 1, 5) : 5;
}

}  // namespace

std::shared_ptr<CredentialHolder> CredentialHolder::Fixed(AwsCredentials credentials) {
  std::shared_ptr<CredentialHolder> h(new CredentialHolder());
  h->source_ = "fixed keys";
  h->current_ = std::make_shared<const AwsCredentials>(std::move(credentials));
  h->initial_ = h->current_;
  return h;
}

std::shared_ptr<CredentialHolder> CredentialHolder::Anonymous() {
  std::shared_ptr<CredentialHolder> h(new CredentialHolder());
  h->anonymous_ = true;
  h->source_ = "none (anonymous)";
  return h;
}

std::shared_ptr<CredentialHolder> CredentialHolder::Refreshing(
    std::unique_ptr<CredentialProvider> provider, AwsCredentials first, Clock clock) {
  std::shared_ptr<CredentialHolder> h(new CredentialHolder());
  h->source_ = provider->Name();
  h->clock_ = std::move(clock);
  h->fetched_s_ = h->Now();
  const int64_t expiration = first.expiration_s;
  h->current_ = std::make_shared<const AwsCredentials>(std::move(first));
  h->initial_ = h->current_;
  h->provider_ = std::move(provider);
  if (expiration != 0) {
    h->next_s_ = RefreshAt(h->fetched_s_, expiration);
    h->thread_ = std::thread([p = h.get()] { p->Run(); });
  }
  return h;
}

CredentialHolder::~CredentialHolder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t CredentialHolder::Now() const { return clock_ ? clock_() : SystemNow(); }

int64_t CredentialHolder::RefreshAt(int64_t fetched_s, int64_t expiration_s) {
  const int64_t lifetime = std::max<int64_t>(expiration_s - fetched_s, 0);
  const int64_t margin = std::clamp<int64_t>(lifetime / 4, 1, 300);
  return std::max(fetched_s, expiration_s - margin);
}

std::shared_ptr<const AwsCredentials> CredentialHolder::Get() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

uint64_t CredentialHolder::refreshes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refreshes_;
}

uint64_t CredentialHolder::failed_refreshes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

bool CredentialHolder::FetchLocked() {
  AwsCredentials fresh;
  Status s = provider_->Fetch(&fresh);
  const int64_t now = Now();
  // Keys already expired (or about to) would be fetched again at once: a failure, retried
  // after the back-off below.
  if (s.ok()) s = CheckCredentialLifetime(fresh, now);
  std::lock_guard<std::mutex> lock(mu_);
  if (s.ok()) {
    if (failing_) {
      Log()->warn("S3 credentials from {}: refreshed again after failures", source_);
    }
    if (fresh.expiration_s != 0 && fresh.expiration_s - now < kShortLifetimeS && !short_warned_) {
      short_warned_ = true;
      Log()->warn(
          "S3 credentials from {}: the keys received live only {} s by this host's "
          "clock (until {}): they are fetched again every few seconds (is this host's "
          "clock ahead of the source's?)",
          source_, fresh.expiration_s - now, FormatIso8601(fresh.expiration_s));
    }
    Log()->debug("S3 credentials from {}: refreshed, valid until {}", source_,
                 fresh.expiration_s ? FormatIso8601(fresh.expiration_s) : std::string("no expiry"));
    failing_ = false;
    ++refreshes_;
    fetched_s_ = now;
    next_s_ = fresh.expiration_s ? RefreshAt(now, fresh.expiration_s) : INT64_MAX;
    current_ = std::make_shared<const AwsCredentials>(std::move(fresh));
    return true;
  }
  ++failed_;
  const int64_t exp = current_ ? current_->expiration_s : 0;
  if (!failing_) {
    Log()->warn(
        "S3 credentials from {}: refresh failed ({}); keeping the current ones until "
        "they expire at {}",
        source_, s.message(), exp ? FormatIso8601(exp) : std::string("?"));
    failing_ = true;
  }
  next_s_ = now + RetryAfterFailureS(exp ? exp - now : 0);
  return false;
}

void CredentialHolder::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    const int64_t wait_s = next_s_ - Now();
    if (wait_s > 0) {
      // Wakes at least once a second so that a substituted clock is followed.
      cv_.wait_for(lock, std::chrono::seconds(std::min<int64_t>(wait_s, 1)));
      continue;
    }
    lock.unlock();
    {
      std::lock_guard<std::mutex> fetch(fetch_mu_);
      bool due;
      {
        std::lock_guard<std::mutex> l(mu_);
        due = next_s_ <= Now() && !stop_;
      }
      if (due) FetchLocked();
    }
    lock.lock();
  }
}

std::shared_ptr<const AwsCredentials> CredentialHolder::RefreshNow(
    const std::shared_ptr<const AwsCredentials>& used) {
  if (!provider_) return Get();
  std::lock_guard<std::mutex> fetch(fetch_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_ != used) return current_;  // another caller (or the refresher) got new ones
    const int64_t now = Now();
    if (failing_ && now < next_s_) return current_;  // the back-off of a failed refresh
    if (now - forced_s_ < kForcedRefreshEveryS) {
      if (now - refused_warned_s_ >= 60) {
        refused_warned_s_ = now;
        Log()->warn(
            "S3 credentials from {}: S3 refuses the keys fetched {} s ago as expired "
            "(is S3's clock ahead of this host's, or was the session revoked?); "
            "fetching again at most every {} s",
            source_, now - fetched_s_, kForcedRefreshEveryS);
      }
      return current_;
    }
    forced_s_ = now;
  }
  FetchLocked();
  return Get();
}

}  // namespace dsfs
