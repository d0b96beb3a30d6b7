/* corral dashboard: live counts and lists over one EventSource, and search "continue".
 * No inline script anywhere (the CSP forbids it): this file is the page's only script.
 * Everything it puts in the page is either text (textContent) or HTML rendered, escaped,
 * by the dashboard itself (the fragment URLs). */
(function () {
  "use strict";

  var MIN_REFRESH_MS = 1000;

  function each(list, fn) {
    Array.prototype.forEach.call(list, fn);
  }

  /* Re-fetch an element's fragment (data-fragment-url): at most one request in flight, and
   * at most one per MIN_REFRESH_MS whatever the rate of updates. */
  function refresher(el) {
    var busy = false, queued = false, last = 0;
    function run() {
      var wait = last + MIN_REFRESH_MS - Date.now();
      if (busy || wait > 0) {
        if (!queued) {
          queued = true;
          setTimeout(function () { queued = false; run(); }, Math.max(wait, 50));
        }
        return;
      }
      busy = true;
      last = Date.now();
      fetch(el.getAttribute("data-fragment-url"), {
        credentials: "same-origin",
        headers: { "Accept": "text/html" }
      }).then(function (response) {
        return response.ok ? response.text() : null;
      }).then(function (html) {
        if (html !== null) { el.innerHTML = html; }
      }).catch(function () { /* the next update tries again */ }).then(function () {
        busy = false;
      });
    }
    return run;
  }

  function applyCounts(queues) {
    each(document.querySelectorAll("[data-queue]"), function (scope) {
      var q = queues[scope.getAttribute("data-queue")];
      if (!q) { return; }
      var counts = q.counts || {};
      Object.keys(counts).forEach(function (state) {
        each(scope.querySelectorAll("[data-count]"), function (el) {
          if (el.getAttribute("data-count") === state) { el.textContent = String(counts[state]); }
        });
      });
      var flags = scope.hasAttribute("data-paused") ? [scope] : [];
      each(scope.querySelectorAll("[data-paused]"), function (el) { flags.push(el); });
      flags.forEach(function (el) { el.hidden = !q.paused; });
    });
  }

  function startLive() {
    var url = document.body.getAttribute("data-live-url");
    if (!url || !window.EventSource) { return; }
    var status = document.getElementById("live-status");
    var list = document.getElementById("job-list");
    var detail = document.getElementById("job-detail");
    var refreshList = list ? refresher(list) : null;
    var refreshDetail = detail ? refresher(detail) : null;
    var first = true;
    var source = new EventSource(url, { withCredentials: true });
    source.addEventListener("open", function () {
      if (status) { status.hidden = false; status.textContent = "live"; status.className = "live on"; }
    });
    source.addEventListener("error", function () {
      if (status) { status.textContent = "reconnecting"; status.className = "live off"; }
    });
    source.addEventListener("update", function (event) {
      var update;
      try { update = JSON.parse(event.data); } catch (e) { return; }
      applyCounts(update.queues || {});
      if (first) { first = false; return; } /* the state the page was rendered with */
      if (refreshList) { refreshList(); }
      if (refreshDetail && (update.jobs || []).indexOf(detail.getAttribute("data-job-id")) >= 0) {
        refreshDetail();
      }
    });
  }

  /* Search: "continue" fetches the next chunk's fragment and adds its rows to the table. */
  function startSearch() {
    document.addEventListener("click", function (event) {
      var link = event.target.closest ? event.target.closest("a[data-next]") : null;
      var box = document.getElementById("search-results");
      if (!link || !box) { return; }
      event.preventDefault();
      fetch(link.href + "&fragment=1", { credentials: "same-origin" }).then(function (r) {
        if (!r.ok) { throw new Error(String(r.status)); }
        return r.text();
      }).then(function (html) {
        var next = document.createElement("div");
        next.innerHTML = html;
        var rows = next.querySelectorAll("tbody tr");
        var tbody = box.querySelector("tbody");
        if (tbody && rows.length) {
          each(rows, function (row) { tbody.appendChild(row); });
          var table = next.querySelector("table");
          if (table) { table.parentNode.removeChild(table); }
        }
        var keep = tbody ? box.querySelector("table") : null;
        box.innerHTML = "";
        if (keep) { box.appendChild(keep); }
        while (next.firstChild) { box.appendChild(next.firstChild); }
      }).catch(function () { window.location.href = link.href; });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    startLive();
    startSearch();
  });
}());
