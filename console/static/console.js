// settle console: a "select all" box ticks every box of its table. The pages work
// without it.
document.addEventListener("change", function (e) {
  var all = e.target;
  if (!all.classList || !all.classList.contains("select-all")) return;
  var table = all.closest("table");
  table.querySelectorAll('tbody input[type="checkbox"]').forEach(function (box) {
    box.checked = all.checked;
  });
});
