// forkq dashboard: the little script it has (loaded from 'self'; no inline script, see the
// Content-Security-Policy). Every page works without it: it only asks before destructive
// actions and ticks every checkbox of a table at once.
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
