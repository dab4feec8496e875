
// The cases' filters: passing cases stay hidden until asked for; outcome, rule (by the
// criterion it reads), criterion and free text narrow what is shown, and the count says how
// many cases are left (or that none is). The page's query sets them at load, so a filtered
// view is a link: report.html?outcome=FAIL&criterion=state_correct&q=ord-02&passing=1.
(function () {
  var sections = Array.prototype.slice.call(document.querySelectorAll('section.case'));
  var field = function (id) { return document.getElementById(id); };
  var words = function (section, name) { return (section.getAttribute(name) || '').split(' '); };
  function shown(section, filters) {
    if (!filters.passing && section.classList.contains('passing') && !filters.narrowed) return false;
    if (filters.outcome && words(section, 'data-outcomes').indexOf(filters.outcome) < 0) return false;
    if (filters.rule && words(section, 'data-failing').indexOf(filters.rule) < 0) return false;
    if (filters.criterion && words(section, 'data-failing').indexOf(filters.criterion) < 0) return false;
    return !filters.needle || section.textContent.toLowerCase().indexOf(filters.needle) >= 0;
  }
  function update() {
    var filters = {
      passing: field('show-passing').checked,
      outcome: field('filter-outcome').value,
      rule: field('filter-rule').value,
      criterion: field('filter-criterion').value,
      needle: field('search').value.toLowerCase()
    };
    // Asking for an outcome or searching looks through every case, passing ones included.
    filters.narrowed = Boolean(filters.outcome || filters.needle);
    var count = 0;
    sections.forEach(function (section) {
      var visible = shown(section, filters);
      section.hidden = !visible;
      if (visible) count += 1;
    });
    field('case-count').textContent = count + ' of ' + sections.length + ' cases shown';
    field('no-match').hidden = count > 0;
  }
  var asked = new URLSearchParams(location.search);
  field('show-passing').checked = asked.get('passing') === '1';
  [['outcome', 'filter-outcome'], ['rule', 'filter-rule'], ['criterion', 'filter-criterion'], ['q', 'search']].forEach(function (pair) {
    if (asked.has(pair[0])) field(pair[1]).value = asked.get(pair[0]);
  });
  if (asked.toString()) update();
  ['show-passing', 'filter-outcome', 'filter-rule', 'filter-criterion', 'search'].forEach(function (id) {
    field(id).addEventListener('input', update);
    field(id).addEventListener('change', update);
  });
  if (location.hash && document.querySelector(location.hash + '.case')) {
    document.querySelector(location.hash + '.case').hidden = false;  // a link to a passing case opens it
  }
})();
