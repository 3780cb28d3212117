// forkq dashboard: the little script it has (loaded from 'self'; no inline script, see the
// Content-Security-Policy). Every page works without it: it only asks before destructive
// actions, ticks every checkbox of a table at once, and refreshes the live parts of a page.
"use strict";

document.addEventListener("submit", (event) => {
  const button = event.submitter;
  const question = (button && button.dataset.confirm) || event.target.dataset.confirm;
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});

document.addEventListener("change", (event) => {
  const box = event.target;
  if (!box.classList || !box.classList.contains("select-all")) {
    return;
  }
  const table = box.closest("table");
  for (const other of table.querySelectorAll('input[type=checkbox][name="id"]')) {
    other.checked = box.checked;
  }
});

// Live refresh. A page marks the parts that change with data-live="NAME" (counts, the
// chart, the running list); every PERIOD the script fetches the page it is on and swaps
// those parts in, without a reload. A "live" toggle in the header turns it off (kept in
// localStorage), it sleeps while the tab is hidden and catches up when it shows again,
// and it leaves alone a part holding a ticked checkbox or the focused field.
const LIVE_PERIOD = 5000;
const LIVE_KEY = "forkq-live";
let liveToggle = null;
let liveStamp = null;
let liveBusy = false;

function liveWanted() {
  return liveToggle !== null && liveToggle.checked && document.visibilityState === "visible";
}

function inUse(region) {
  const focused = document.activeElement;
  if (focused && region.contains(focused) && focused.matches("input, select, textarea")) {
    return true;
  }
  return region.querySelector('input[type=checkbox]:checked') !== null;
}

async function liveRefresh() {
  if (liveBusy || !liveWanted()) {
    return;
  }
  liveBusy = true;
  try {
    const response = await fetch(window.location.href, {
      credentials: "same-origin",
      cache: "no-store",
      headers: { "X-Forkq-Live": "1" },
    });
    if (!response.ok || response.redirected) {
      liveStamp.textContent = "not updated (" + response.status + ")";
      return;
    }
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    for (const region of document.querySelectorAll("[data-live]")) {
      const name = region.dataset.live;
      const next = [...fresh.querySelectorAll("[data-live]")].find((r) => r.dataset.live === name);
      if (next && !inUse(region)) {
        region.replaceWith(document.importNode(next, true));
      }
    }
    liveStamp.textContent = "updated " + new Date().toLocaleTimeString();
  } catch (error) {
    liveStamp.textContent = "not updated (no answer)";
  } finally {
    liveBusy = false;
  }
}

function liveStart() {
  const meta = document.querySelector("header.top .meta");
  if (!meta || document.querySelector("[data-live]") === null) {
    return;
  }
  const label = document.createElement("label");
  label.className = "live";
  liveToggle = document.createElement("input");
  liveToggle.type = "checkbox";
  liveToggle.id = "live-toggle";
  liveToggle.checked = window.localStorage.getItem(LIVE_KEY) !== "off";
  liveStamp = document.createElement("span");
  liveStamp.className = "live-stamp";
  label.append(liveToggle, " live ", liveStamp);
  meta.prepend(label);
  liveToggle.addEventListener("change", () => {
    window.localStorage.setItem(LIVE_KEY, liveToggle.checked ? "on" : "off");
    liveStamp.textContent = liveToggle.checked ? "" : "paused";
    liveRefresh();
  });
  if (!liveToggle.checked) {
    liveStamp.textContent = "paused";
  }
  document.addEventListener("visibilitychange", liveRefresh);  // catch up when shown
  window.setInterval(liveRefresh, LIVE_PERIOD);
}

liveStart();
