
document.getElementById('search').addEventListener('input', function (event) {
  var needle = event.target.value.toLowerCase();
  document.querySelectorAll('section.case').forEach(function (section) {
    section.style.display = section.textContent.toLowerCase().indexOf(needle) >= 0 ? '' : 'none';
  });
});
