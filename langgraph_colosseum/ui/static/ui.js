// The inspector's only script (served from /static: the page's CSP allows no inline code).
// 1. Forms that change state ask first. 2. A thread page follows its thread live:
// on each server-sent "head" event it fetches itself again and swaps <main>, which
// the server rendered (escaped) just as on a first load.
"use strict";

function confirmForms(root) {
  for (const form of root.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
}

function follow(main) {
  const status = document.getElementById("live-status");
  const source = new EventSource(main.dataset.live);
  source.addEventListener("open", () => { status.textContent = "live"; status.className = "on"; });
  source.addEventListener("error", () => { status.textContent = "reconnecting"; status.className = "off"; });
  source.addEventListener("head", async () => {
    const response = await fetch(window.location.href, { credentials: "same-origin" });
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    const next = fresh.querySelector("main");
    if (!next) return;
    main.replaceChildren(...next.childNodes);
    confirmForms(main);
    main.dataset.updates = String(Number(main.dataset.updates || 0) + 1);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  confirmForms(document);
  const main = document.querySelector("main[data-live]");
  if (main) follow(main);
});
