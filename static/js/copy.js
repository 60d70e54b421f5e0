// "Copy" buttons: copy the value of the field named by data-copy. Without JavaScript the field is
// still there, selectable, and the button stays hidden.
document.querySelectorAll("button[data-copy]").forEach(function (button) {
  var field = document.getElementById(button.getAttribute("data-copy"));
  if (!field || !navigator.clipboard) return;
  button.hidden = false;
  button.addEventListener("click", function () {
    navigator.clipboard.writeText(field.value).then(function () {
      button.textContent = "Copied";
    });
  });
});
